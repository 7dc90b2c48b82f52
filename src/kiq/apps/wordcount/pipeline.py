"""Word count (seed 001): words (the record key) → the table ``word-counts``, value
``{"word", "count"}``, keyed by the word. The table's name is its query's name, which is
its checkpoint directory: renaming it starts it afresh. Ranked by ``count``: the nodes keep
each partition's words by count, for ``GET /v1/words/top``."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kiq import Context

WORDS = "words"
WORD_COUNTS = "word-counts"


def build(ctx: Context) -> None:
    words = ctx.read(WORDS).where("__key IS NOT NULL")
    # Grouped by partition too: a word's records share one, and so the state's shape stays
    # what it has been (a restart resumes older checkpoints).
    by_word = words.groupBy(words["__key"].alias("word"), words["__partition"].alias("partition"))
    counts = by_word.count()
    ctx.write_table(WORD_COUNTS, counts.select("word", "count"), key="word", rank_by="count")
