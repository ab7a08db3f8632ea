"""The audit trail (the paper's section 4): count what a reader received against the producers' monitoring events.

The envelope and the events are in L{twlog.envelope} (low in the layers, so the
producer and consumers use them); this package reads and counts:
L{twlog.audit.count} (the rules), L{twlog.audit.read} (a cluster),
L{twlog.audit.spark} (a Spark DataFrame with the envelope columns).
"""

from twlog.audit.count import AuditCount, WindowReport
from twlog.audit.read import count_cluster
from twlog.audit.spark import audit_dataframe

__all__ = ["AuditCount", "WindowReport", "audit_dataframe", "count_cluster"]
