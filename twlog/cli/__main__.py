"""C{python -m twlog.cli}: the same as the C{twlog} command."""

import sys

from twlog.cli.main import main

sys.exit(main())
