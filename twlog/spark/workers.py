# -*- test-case-name: tests.integration.test_spark_workers -*-
"""Whether Spark's Python workers can import twlog: checked on the driver before the source is registered.

Spark runs a data source in Python worker processes started with C{PYSPARK_PYTHON}
(by default the C{python3} on the PATH), not with the Python running the job.  When
that Python lacks twlog's dependencies, a job that registers the source fails much
later, in a worker, with an unrelated-looking C{No module named 'attrs'}.
L{check_workers_python} runs the workers' Python once, the way Spark does (pyspark's
own zips on its path, in this directory), and turns that into one clear error.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys

from twlog.errors import TwlogError

#: How long the workers' Python may take to import the source.
CHECK_TIMEOUT_S = 60.0


class WorkersCannotImportTwlog(TwlogError):
    """Spark's Python workers run a Python that cannot import twlog: set PYSPARK_PYTHON."""


def check_workers_python(python: str, timeout_s: float = CHECK_TIMEOUT_S) -> None:
    """Raise unless C{python} (the session's C{sparkContext.pythonExec}) imports the twlog data source.

    Nothing is run when it is the Python running this code.

    @raise WorkersCannotImportTwlog: naming the Python, what it could not import, and the fix.
    """
    found = shutil.which(python) or python
    if os.path.realpath(found) == os.path.realpath(sys.executable):
        return
    import pyspark

    lib = os.path.join(os.path.dirname(pyspark.__file__), "python", "lib")
    path = sorted(glob.glob(os.path.join(lib, "*.zip")))  # what Spark puts on a worker's PYTHONPATH
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(path + [p for p in [os.environ.get("PYTHONPATH")] if p]))
    try:
        ran = subprocess.run([found, "-c", "import twlog.spark.source"], env=env, capture_output=True, text=True,
                             timeout=timeout_s, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        problem = str(e)
    else:
        if ran.returncode == 0:
            return
        lines = ran.stderr.strip().splitlines()
        problem = lines[-1] if lines else f"exit status {ran.returncode}"
    raise WorkersCannotImportTwlog(
        f"Spark's Python workers run {python} (PYSPARK_PYTHON, by default the python3 on the PATH), which cannot "
        f"import twlog ({problem}): set PYSPARK_PYTHON={sys.executable} (the Python that has twlog) before the "
        "session starts"
    )
