"""The tool error a client gets for a flow that ended without a connection (`failure_text`)."""

from __future__ import annotations

from service.observability.flow_events import FAILURE_TEXT, GENERIC, RETRY_HINT, FlowOutcome, failure_text


def test_each_known_outcome_has_its_text_and_the_rest_the_generic_one() -> None:
    for outcome, text in FAILURE_TEXT.items():
        assert failure_text(outcome.value, "MockHub") == text.format(provider="MockHub") + RETRY_HINT
    generic = GENERIC.format(provider="MockHub") + RETRY_HINT
    # No reason known (a failure read from the store), one this version does not know, and an
    # outcome that is not a failure: the generic text, never an error.
    for outcome in (None, "", "no_such_outcome", FlowOutcome.COMPLETED.value):
        assert failure_text(outcome, "MockHub") == generic
