"""The soak's command line (vt/server/soak.py) refuses a run of no time or no clients in one line. Apart from
test_soak.py: its mutant needs this test alone, not the 12-second soak beside it."""

from __future__ import annotations


def test_the_soak_refuses_a_run_of_no_time_or_no_clients_in_one_line(capsys) -> None:
    import pytest

    from vt.server.soak import main

    for argv in (["--seconds", "-1"], ["--seconds", "nan"], ["--clients", "0"]):
        with pytest.raises(SystemExit) as e:
            main(argv)
        err = capsys.readouterr().err
        assert e.value.code == 2 and "need at least 1 second and 1 client" in err, (argv, err)
