"""The fleet data pipeline: ``kgate report`` turns audit-log files (docs/audit-log.md) into reports.

It runs on Spark through PySpark, locally by default and on any cluster with ``--master``. It
reads files only: nothing here imports the proxy, the filters or the configuration, so a fleet's
logs can be analysed on a machine that never runs kgate. PySpark is imported lazily by the
modules that need it; importing this package costs nothing.
"""
