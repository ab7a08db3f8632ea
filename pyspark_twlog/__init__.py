"""PySpark's automatic registration hook for the twlog data source.

PySpark 4 looks, when a session starts, for installed top-level packages named
C{pyspark_*} that define C{DefaultSource}; this one makes C{spark.read.format("twlog")}
work with no C{register(spark)} call.  The source itself lives in L{twlog.spark}.
"""

from twlog.spark.source import TwlogDataSource as DefaultSource

__all__ = ["DefaultSource"]
