"""A Spark driver for the exactly-once tests, run as a process of its own so
a test can SIGKILL it (and its JVM) mid-write and run it again.

``python -m tests.spark.eo_job MASTER SERVERS batch SOURCE SINK WRITE_ID``
copies every message of SOURCE to SINK with a batch write;
``... stream SOURCE SINK CHECKPOINT`` does it with an availableNow streaming
query of several micro-batches. Both write with ``exactlyOnce``.
"""

from __future__ import annotations

import sys

from tests.spark.conftest import spark_session

QUERY_TIMEOUT = 300


def main(master: str, servers: str, mode: str, source: str, sink: str, where: str) -> None:
    conf = {"spark.cores.max": "2"}
    if master.startswith("spark://"):
        conf["spark.executor.memory"] = "512m"  # what a test cluster's worker offers
    spark = spark_session(master, **conf)
    try:
        if mode == "batch":
            df = (
                spark.read.format("liftbridge")
                .option("servers", servers)
                .option("stream", source)
                .load()
            )
            df.select("key", "value").write.format("liftbridge").option("servers", servers).option(
                "stream", sink
            ).option("exactlyOnce", "true").option("writeId", where).mode("append").save()
            return
        df = (
            spark.readStream.format("liftbridge")
            .option("servers", servers)
            .option("stream", source)
            .option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", "4000")
            .load()
        )
        query = (
            df.select("key", "value")
            .writeStream.format("liftbridge")
            .option("servers", servers)
            .option("stream", sink)
            .option("exactlyOnce", "true")
            .option("checkpointLocation", where)
            .trigger(availableNow=True)
            .start()
        )
        if not query.awaitTermination(QUERY_TIMEOUT):
            query.stop()
            raise SystemExit("the query did not finish")
        if query.exception() is not None:
            raise SystemExit(f"the query failed: {query.exception()}")
    finally:
        spark.stop()


if __name__ == "__main__":
    main(*sys.argv[1:7])
