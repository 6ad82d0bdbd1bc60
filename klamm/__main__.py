import sys

from klamm.cli.main import main

sys.exit(main())
