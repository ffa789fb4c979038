"""Importance: the heuristic's ordering, and the LLM scorer through the client layer."""

from __future__ import annotations

from contextwarden.llm import OpenAIChatModel
from contextwarden.memory import HeuristicImportance, LLMImportance
from contextwarden.testing import ScriptedError, ScriptedOpenAIServer


def test_heuristic_ranks_constraints_errors_and_identifiers_above_chitchat() -> None:
    score = HeuristicImportance()
    chit = score("thanks!", role="user")
    plain = score("I had a walk in the park this morning", role="user")
    constraint = score("You must never push to main directly.", role="user")
    error = score("Traceback: KeyError in src/billing/invoice.py line 88", role="tool")
    decision = score("We decided to switch to Postgres for the ledger.", role="assistant")
    assert chit < plain < min(constraint, error, decision)
    assert all(0.0 <= v <= 1.0 for v in (chit, plain, constraint, error, decision))


def test_llm_scorer_reads_the_models_rating_and_falls_back_on_failure() -> None:
    with ScriptedOpenAIServer(["8", "no idea", ScriptedError.server_error(500)]) as server:
        model = OpenAIChatModel("scorer", base_url=server.base_url, max_retries=0)
        scorer = LLMImportance(model)
        assert scorer("Deploys must never run on Fridays.") == 0.8
        fallback = HeuristicImportance()("thanks!")
        assert scorer("thanks!") == fallback
        assert scorer("thanks!") == fallback
        model.close()
        assert "Deploys must never" in server.requests[0]["messages"][0]["content"]
