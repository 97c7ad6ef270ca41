"""Root conftest: load the harness plugin (options, profiles) for every test run."""

pytest_plugins = ["fixtures.pytest_plugin"]
