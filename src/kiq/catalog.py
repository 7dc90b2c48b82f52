"""The names kiq ships: the pipelines, their topics, and the tables nodes serve from them.

The pipelines write these topics, the nodes serve each as a table of the same
name, the API looks the tables up, and the demo, the benchmarks and the feeds
create, declare and fill them: named once here, they cannot drift apart. This
module imports nothing, so every layer may use it.
"""

# The stock pipeline (seed 000): ticks in; three compacted tables and the dead letters out.
STOCK_TICKS = "stock-ticks"
STOCK_TICKS_DLQ = "stock-ticks-dlq"
STOCK_QUOTES = "stock-quotes"
STOCK_DAY_STATS = "stock-day-stats"
STOCK_BARS = "stock-bars-1m"
STOCK_TABLE_TOPICS = (STOCK_QUOTES, STOCK_DAY_STATS, STOCK_BARS)
# Day statistics and bars are windowed tables, keys SYMBOL|START|END (the day's or the
# minute's start and end, ISO 8601 UTC to the ms): the symbol before the separator picks
# the partition, so a symbol's rows share one.
STOCK_KEY_SEP = "|"
# The exchanges the pipeline accepts ticks from, and those the feeds simulate by default.
STOCK_EXCHANGES = ("NYSE", "NASDAQ", "ARCA", "BATS", "IEX")

# Word count (seed 001): words in, a count per word out.
WORDS = "words"
WORD_COUNTS = "word-counts"

# Where a serving node sends the records it cannot serve ([serve] dead_letter_topic).
DEAD_LETTERS = "kiq-dead-letters"

# The table catalog: one compacted, single-partition topic where every pipeline records the
# spec of each table it writes (topic, key parts, separator, format, partitioning) and from
# which the nodes learn what to serve, so a table is declared once, in its pipeline.
CATALOG_TOPIC = "kiq-catalog"

# Each streaming query's latest progress, as its Spark driver publishes it every few seconds:
# compacted, key APP/PIPELINE/QUERY, a JSON record (kiq.progress). The nodes'
# GET /v1/pipelines and `kiq up`'s console read it.
PROGRESS_TOPIC = "kiq-progress"

# The pipelines `kiq pipeline run` knows; each name is also its checkpoint directory.
STOCKS_PIPELINE = "stocks"
WORDCOUNT_PIPELINE = "wordcount"

# The shipped tables as `kiq serve --table` declares them.
STOCK_TABLES = (
    f"{STOCK_QUOTES}={STOCK_QUOTES}",
    f"{STOCK_BARS}={STOCK_BARS},sep={STOCK_KEY_SEP}",
    f"{STOCK_DAY_STATS}={STOCK_DAY_STATS},sep={STOCK_KEY_SEP}",
)
WORD_TABLES = (f"{WORD_COUNTS}={WORD_COUNTS}",)

# The shipped applications' routes: what their application file names in `[app] endpoints`,
# and what kiq's own benchmarks and tests mount on the nodes they start (`LocalNode`).
SHIPPED_ENDPOINTS = ("kiq.apps.stocks.api:routes", "kiq.apps.wordcount.api:routes")
