collect_ignore = ["fixture_project"]
