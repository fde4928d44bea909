import sys

from relaxps_launch.cli import main

sys.exit(main(sys.argv[1:]))
