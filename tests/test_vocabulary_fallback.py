"""The last step before `unknown`: the failure-vocabulary entry closest to the error lines lends its class weakly,
and never to a line its authors listed as a counter-example."""

from triage_support import triage_files

from diagnoser.models import DecidedBy
from diagnoser.prefilter.runbooks import Runbook
from diagnoser.retrieve.vocabulary import MAX_CONFIDENCE, closest_entry

SERVER_ERROR = "tracker: ERROR Error while calling the tracker API: internal database error (<Response [500]>)"
REFUSED = "tracker: ERROR Error while calling the tracker API: permission denied (<Response [403]>)"


def _entry(rule_id: str, category: str, action: str, match: list[str], no_match: list[str]) -> Runbook:
    return Runbook(id=rule_id, title=f"the tracker's {rule_id}", category=category, subtype=rule_id.replace("-", "_"),
                   action=action, priority=50, confidence=0.6, signatures=[r"\bno such line\b"],
                   examples={"match": match, "no_match": no_match})


OUTAGE = _entry("tracker-outage", "infra", "retry_after_backoff", [SERVER_ERROR], [REFUSED])
CREDENTIALS = _entry("tracker-credentials", "user_code", "stop_and_notify", [REFUSED], [SERVER_ERROR])


def test_the_closest_entry_lends_its_class():
    found = closest_entry(SERVER_ERROR.replace("internal database error", "internal server error"),
                          [OUTAGE, CREDENTIALS])
    assert found is not None and found.rule.id == "tracker-outage"
    found = closest_entry(REFUSED, [OUTAGE, CREDENTIALS])
    assert found is not None and found.rule.id == "tracker-credentials"


def test_a_line_an_entry_lists_as_its_counter_example_is_not_that_entrys():
    """Masking hides the status code, so the 500 line reads as the credentials entry's own example; its
    counter-example says otherwise, and with the outage entry gone the answer is no entry, not the wrong one."""
    assert closest_entry(SERVER_ERROR, [CREDENTIALS]) is None
    assert closest_entry(REFUSED, [OUTAGE]) is None


def test_a_triage_nothing_matched_takes_the_closest_shipped_entry_weakly(tmp_path):
    """No signature fires on an unprefixed W&B 401 line; its vocabulary entry still names the class, at a confidence
    that reads as the guess it is."""
    d = triage_files(tmp_path, {"train.log": (
        "step 200 loss 2.31\n"
        "Error while calling W&B API: user is not logged in (<Response [401]>)\n")})
    assert d.decided_by is DecidedBy.RETRIEVAL and d.confidence <= MAX_CONFIDENCE
    assert (d.category.value, d.subtype) == ("user_code", "tracker_credentials")
