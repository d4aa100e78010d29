"""Names the gateway gave back (docs/agents.md): upstream model names compiled with the config, and the
bounded per-process map of names upstreams reported, which never shadows a name the config resolves."""

from __future__ import annotations

from gateway.config.aliases import Named, compile_names
from gateway.config.types import ApiKey, ModelConfig
from gateway.pipeline.served_names import MAX_LEARNED, MAX_MODELS_PER_NAME, LearnedNames, served_model

NAMES, _ = compile_names([Named("models[0]", "a", ("alias-a", "glob-*"), ("dep-x", "dep-y")),
                          Named("models[1]", "b", (), ("dep-x",)),
                          Named("models[2]", "c", (), ("dep-z",))])
MODELS = {n: ModelConfig(n, ()) for n in ("a", "b", "c")}


def pick(name: str, learned: LearnedNames, allowed: tuple[str, ...] | None = None) -> str | None:
    key = ApiKey("k", models=allowed) if allowed is not None else None
    got = served_model(name, key, NAMES, learned, MODELS.get)
    return got.name if got is not None else None


def test_configured_upstream_names_reach_the_first_model_in_config_order_the_key_may_use() -> None:
    assert NAMES.served_as("dep-x") == ("a", "b") and NAMES.served_as("dep-y") == ("a",)
    learned = LearnedNames()
    assert pick("dep-x", learned) == "a"
    assert pick("dep-x", learned, ("b",)) == "b"
    assert pick("dep-x", learned, ("c",)) == "a"  # allowed none: the caller's authorisation refuses it
    assert pick("nothing", learned) is None


def test_reported_names_are_learned_unless_the_config_resolves_them() -> None:
    learned = LearnedNames()
    for reported in ("dep-x", "alias-a", "glob-anything", "a", "dep-z", None, 7, "bad name", "x" * 129):
        learned.learn(reported, "c", "dep-z", NAMES)
    assert len(learned) == 0
    learned.learn("dep-z-2025", "c", "dep-z", NAMES)
    learned.learn("dep-z-2025", "b", "dep-x", NAMES)
    learned.learn("dep-z-2025", "a", "dep-x", NAMES)
    assert learned.models("dep-z-2025") == ("c", "b", "a")
    assert pick("dep-z-2025", learned) == "a"  # config order, not the order learned
    assert pick("dep-z-2025", learned, ("c",)) == "c"


def test_the_learned_map_is_bounded() -> None:
    learned = LearnedNames()
    for i in range(MAX_LEARNED + 10):
        learned.learn(f"snap-{i}", "a", "dep-x", NAMES)
    assert len(learned) == MAX_LEARNED
    assert learned.models("snap-0") == () and learned.models(f"snap-{MAX_LEARNED + 9}") == ("a",)
    many = LearnedNames()
    for i in range(MAX_MODELS_PER_NAME + 5):
        many.learn("snap", f"m{i}", "dep-x", NAMES)
    assert len(many.models("snap")) == MAX_MODELS_PER_NAME


def test_a_name_the_config_resolves_is_remembered_per_compiled_config() -> None:
    learned = LearnedNames()
    learned.learn("glob-snap-1", "c", "dep-z", NAMES)
    learned.learn("glob-snap-1", "c", "dep-z", NAMES)
    assert learned.models("glob-snap-1") == ()
    reloaded, _ = compile_names([Named("models[0]", "c", (), ("dep-z",))])  # no glob any more
    learned.learn("glob-snap-1", "c", "dep-z", reloaded)
    assert learned.models("glob-snap-1") == ("c",)


def test_names_from_the_state_are_adopted_only_for_a_model_and_deployment_of_this_config() -> None:
    """What another process recorded (docs/agents.md): kept when this config has that model serving under
    that configured upstream name and does not resolve the name itself; anything else reaches nothing."""
    from gateway.state.base import ServedName

    learned = LearnedNames()
    learned.adopt("dep-z-2025", [ServedName("c", "dep-x"), ServedName("gone", "dep-z"),
                                 ServedName("a", "dep-old")], NAMES)
    assert len(learned) == 0 and pick("dep-z-2025", learned) is None
    learned.adopt("glob-snap", [ServedName("a", "dep-x")], NAMES)  # the config resolves it: never learned
    learned.adopt("dep-z-2025", [ServedName("c", "dep-z"), ServedName("b", "dep-x")], NAMES)
    assert learned.models("dep-z-2025") == ("c", "b") and len(learned) == 1
    assert pick("dep-z-2025", learned) == "b"
    assert learned.learn("dep-z-2025", "a", "dep-x", NAMES) and not learned.learn("dep-z-2025", "a", "dep-x", NAMES)


def test_a_learned_name_still_answered_under_is_recorded_again_once_a_day() -> None:
    """True tells the runtime to record the name in the state backend: when first learned, and again once
    `RECORD_AGAIN_S` passed, so the shared record (with its TTL) outlives a process that runs for weeks."""
    from gateway.pipeline.served_names import RECORD_AGAIN_S

    now = [0.0]
    learned = LearnedNames(clock=lambda: now[0])
    assert learned.learn("dep-z-2025", "c", "dep-z", NAMES)
    now[0] += RECORD_AGAIN_S - 1
    assert not learned.learn("dep-z-2025", "c", "dep-z", NAMES)
    now[0] += 1
    assert learned.learn("dep-z-2025", "c", "dep-z", NAMES)
    assert not learned.learn("dep-z-2025", "c", "dep-z", NAMES)
