"""One SparkContext per process: make_spark refuses another master whichever thread asks.

SparkSession.getActiveSession() is per thread (the JVM thread Py4J pins to the Python
thread), so the check once missed a session started in another thread and quietly ran on
it instead of on the cluster asked for (make test: `logquake analyze --spark-master` in a
test process whose session an in-process run had started in its own thread).
"""

from __future__ import annotations

import threading

from checkers.spark import SparkMasterConflict, make_spark


def test_a_second_master_is_refused_from_a_thread_that_did_not_start_the_session(spark):
    refused: list[BaseException] = []
    joined: list[object] = []

    def ask() -> None:
        try:
            joined.append(make_spark(spark_master="spark://127.0.0.1:1"))
        except SparkMasterConflict as exc:
            refused.append(exc)

    asker = threading.Thread(target=ask)
    asker.start()
    asker.join(timeout=120)
    assert not joined, "the local session was handed back for another master"
    assert refused and spark.sparkContext.master in str(refused[0]) and "spark://127.0.0.1:1" in str(refused[0])
