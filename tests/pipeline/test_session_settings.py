"""A short run's Spark settings: a small local input gets a JVM without the optimizing JIT and the
parallel collector, and two shuffle partitions (issue 26: 10,000 events cold spent ~30% of their
CPU on them); a large or remote input keeps the settings that pay off over minutes. Pure: no Spark
is started (the settings are what ``build_session`` hands the builder)."""

from __future__ import annotations

from pathlib import Path

from kgate.pipeline.cli import _local_bytes
from kgate.pipeline.session import SMALL_INPUT_BYTES, is_small, local_settings


def test_a_small_input_gets_the_short_run_jvm_and_two_partitions() -> None:
    small = local_settings(shuffle_partitions=16, small=True)
    assert "-XX:TieredStopAtLevel=1" in small["spark.driver.extraJavaOptions"]
    assert "-XX:+UseSerialGC" in small["spark.driver.extraJavaOptions"]
    # the first tier alone would get 48 MiB of code cache, which one long session of Spark's generated
    # classes filled (the suite's one SparkSession died "Out of space in CodeCache for adapters")
    assert "-XX:ReservedCodeCacheSize=240m" in small["spark.driver.extraJavaOptions"]
    assert small["spark.sql.shuffle.partitions"] == "2"
    assert "log4j2.configurationFile" in small["spark.driver.extraJavaOptions"]

    large = local_settings(shuffle_partitions=16)
    assert "TieredStopAtLevel" not in large["spark.driver.extraJavaOptions"]
    assert "-XX:+UseParallelGC" in large["spark.driver.extraJavaOptions"]
    assert large["spark.sql.shuffle.partitions"] == "16"
    # a caller's smaller number (the tests' 1 partition) is kept
    assert local_settings(shuffle_partitions=1, small=True)["spark.sql.shuffle.partitions"] == "1"


def test_input_size_decides(tmp_path: Path) -> None:
    a, b = tmp_path / "a.jsonl", tmp_path / "b.parquet"
    a.write_bytes(b"x" * 1000)
    b.write_bytes(b"y" * 234)
    assert _local_bytes([str(a), str(b)]) == 1234
    assert is_small(1234)
    assert not is_small(SMALL_INPUT_BYTES)
    # unknown (remote input, --follow, a file gone since it was listed): the settings of a long run
    assert _local_bytes([str(a), "s3a://bucket/audit/"]) is None
    assert _local_bytes([]) is None
    assert _local_bytes([str(tmp_path / "gone.jsonl")]) is None
    assert not is_small(None)
