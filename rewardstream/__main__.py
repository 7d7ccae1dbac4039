"""``python -m rewardstream``: the same as the ``rewardstream`` console script."""

from rewardstream.cli.main import main

main()
