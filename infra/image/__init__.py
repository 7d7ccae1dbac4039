"""The rewardstream container image: built here from Debian packages and the project's wheel, never pulled."""
