"""What the tests share: paths, the CLI runner, builders of exports and runs, the browser's helpers.

Test modules import from here, never from each other; fixtures live in tests/conftest.py."""
