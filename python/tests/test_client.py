"""The client's reading of the service's answers, without a service."""
from databuild.client import BuildAnswer


def test_a_planned_build_has_not_ended():
    planned = BuildAnswer.of({"build_request_id": "b", "status": "analysis_completed", "analyze_only": False})
    assert not planned.ended


def test_an_analysis_ends_when_analyzed():
    analyzed = BuildAnswer.of({"build_request_id": "b", "status": "analysis_completed", "analyze_only": True})
    assert analyzed.ended


def test_final_statuses_end_a_build():
    for status in ("completed", "failed", "cancelled"):
        assert BuildAnswer.of({"build_request_id": "b", "status": status}).ended
    for status in ("received", "planning", "executing"):
        assert not BuildAnswer.of({"build_request_id": "b", "status": status}).ended
