from tests.mutations.runner_rig import project  # noqa: F401 - the fixture, for every runner test file

collect_ignore = ["fixture_project"]
