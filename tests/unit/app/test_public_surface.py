"""``from kiq import ...`` points into ``kiq.app`` alone, and every name there resolves."""

from __future__ import annotations

import importlib

import kiq


def test_every_public_name_is_defined_under_kiq_app() -> None:
    outside = {
        name: module for name, module in kiq._EXPORTS.items() if not module.startswith("kiq.app.")
    }
    assert outside == {}


def test_every_public_name_resolves_to_the_object_its_module_names() -> None:
    for name in kiq.__all__:
        module = importlib.import_module(kiq._EXPORTS[name])
        assert getattr(kiq, name) is getattr(module, name), name
