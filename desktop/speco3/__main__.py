import sys

from speco3.cli import main

sys.exit(main())
