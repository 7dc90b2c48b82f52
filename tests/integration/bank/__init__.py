"""The bank: 1,000 accounts on 6 partitions, kept by a consistent pipeline from random
transfers (``pipeline.py``), a feed of transfers (``feed.py``) and a reader of the table's
log up to its markers (``ledger.py``). Every transfer moves an amount between two accounts
in one input record, so the balances sum to 0 at every batch boundary."""
