"""The PySpark data source C{twlog} (in L{twlog.spark.source}; importing it needs pyspark)."""
