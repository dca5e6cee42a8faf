"""pytest-benchmark suites (``make bench``): each times alternatives side by side in one run."""
