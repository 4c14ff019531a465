"""A small Spark pipeline: read a stream, aggregate per key, write the results
to another stream.

It reads every message of SOURCE, counts the messages and their value bytes
per key, and publishes one JSON result per key to TARGET (keyed by the same
key, so each key's results land on one partition). Needs the spark extra
(``pip install 'liftbridge[spark]'``) and Java 17+.

    python examples/spark_pipeline.py HOST:PORT SOURCE TARGET [--master local[2]]
"""

from __future__ import annotations

import argparse

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

import liftbridge.spark


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("servers", help="Liftbridge address(es), comma-separated")
    parser.add_argument("source", help="stream to read")
    parser.add_argument("target", help="stream to write the per-key results to")
    parser.add_argument("--master", default="local[2]", help="Spark master URL")
    args = parser.parse_args()

    spark = (
        SparkSession.builder.master(args.master)
        .appName("liftbridge-pipeline")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    liftbridge.spark.register(spark)  # optional once the package is installed
    try:
        messages = (
            spark.read.format("liftbridge")
            .option("servers", args.servers)
            .option("stream", args.source)
            .load()
        )
        per_key = messages.groupBy("key").agg(
            F.count("*").alias("messages"),
            F.sum(F.length("value")).alias("bytes"),
        )
        per_key.cache()  # written and printed below: read the source once
        results = per_key.select(
            "key",
            F.to_json(
                F.struct(
                    F.coalesce(F.col("key").cast("string"), F.lit("")).alias("key"),
                    "messages",
                    "bytes",
                )
            ).alias("value"),
        )
        results.write.format("liftbridge").option("servers", args.servers).option(
            "stream", args.target
        ).mode("append").save()
        rows = per_key.orderBy("key").collect()
        for row in rows:
            key = row["key"].decode() if row["key"] is not None else "(no key)"
            print(f"{key}: {row['messages']} messages, {row['bytes']} bytes")
        print(f"wrote {len(rows)} per-key results to {args.target!r}")
    finally:
        spark.stop()


if __name__ == "__main__":
    main()
