"""Which domain a `Scorer` scores as: a name or index resolved, the mean over domains, the default's note."""

from __future__ import annotations

from sqa.scoring.clips import warn_at_caller
from sqa.scoring.retrieval import RetrievalScoring, neighbours_note
from sqa.scoring.scorer_warnings import DomainWarning

# The `domain` that averages a clip's scores over every domain the model embeds.
MEAN_DOMAIN = "mean"


def check_domain_asked(domain: str | int | None, embedded: int | None) -> None:
    """Refuse a `domain` for a model without domain IDs (`embedded` None): it would change nothing."""
    if domain is not None and embedded is None:
        raise ValueError(
            f"domain {domain!r}: this model has no domain embedding (it was trained without domain "
            "IDs), so it scores every clip alike; leave the domain out"
        )


def resolve_domain(domain: str | int | None, domains: list[str], embedded: int | None = None) -> int:
    """Index of `domain` (a name or an index) in `domains`; None means the first one.

    `embedded` is the number of domains the model's embedding holds (None: as many as
    `domains`): a domain of the list beyond it (a config.yaml listing more domains than the
    model was built with) is refused by name rather than failing inside the embedding.
    """
    if domain is None:
        return 0
    text = str(domain)
    if isinstance(domain, int) or (text.isascii() and text.isdigit()):
        # Compared as text first: int() of thousands of digits is itself an error.
        index = int(domain) if len(text) <= 9 else -1
        if not 0 <= index < max(len(domains), 1):
            raise ValueError(f"domain index {text} out of range for domains {domains}")
    elif domain not in domains:
        raise ValueError(f"unknown domain {domain!r}; the export knows {domains}")
    else:
        index = domains.index(domain)
    if embedded is not None and index >= embedded:
        # Reached only with a non-empty list: an empty one allows index 0, which every model embeds.
        raise ValueError(
            f"domain {domains[index]!r} (index {index}): the export's config.yaml lists domains "
            f"{domains}, but its model embeds only {embedded} (model.num_domains): the first "
            f"{embedded} of the list can be scored"
        )
    return index


def default_domain_note(domains: list[str], embedded: int) -> str:
    """The one line saying that a model with `embedded` domains scores as its first, and why."""
    name = f"{domains[0]!r}" if domains else "0"
    return (
        f"scoring as domain {name} (index 0), the first of the {embedded} this model was trained with "
        "(domain IDs), because no domain was given; --domain NAME|INDEX (domain=) picks one, "
        f"--domain {MEAN_DOMAIN} averages over all"
    )


def scored_domains(
    domain: str | int | None,
    domains: list[str],
    embedded: int | None,
    retrieval: RetrievalScoring | None = None,
) -> tuple[list[int], str | None]:
    """The domain indices a clip is scored as (several: their mean) and the note on them, or None.

    `domains` is the export's list and `embedded` the model's domain count (None: no domain
    embedding). `domain="mean"` gives every domain both listed and embedded; a datastore's
    domain lookup gives none (each clip's is looked up from its neighbours) and says so; else the
    one index of `domain`. The first of several embedded domains, taken because no domain was
    given, is said by a `DomainWarning` as well as in the note.
    """
    if embedded is not None and domain == MEAN_DOMAIN:
        # The domains both listed and embedded (an empty list names none: all embedded ones).
        return list(range(min(len(domains) or embedded, embedded))), None
    if retrieval is not None and retrieval.neighbour_domains:
        # Looked up per clip in the forward pass: no fixed domain.
        return [], neighbours_note(retrieval.store)
    indices = [resolve_domain(domain, domains, embedded)]
    if domain is None and embedded is not None and embedded > 1:
        note = default_domain_note(domains, embedded)
        warn_at_caller(note, DomainWarning)
        return indices, note
    return indices, None
