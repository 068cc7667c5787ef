"""The top-p nucleus (proposer/backends/logprobs.py ``nucleus``), which the samplers draw from and the trainer
renormalises over: the partial sort gives the mask a full sort gives, ties at the edge kept."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from proposer.backends.logprobs import nucleus, tempered_logprobs  # noqa: E402


def full_sort_mask(p: torch.Tensor, top_p: float) -> torch.Tensor:
    """What the samplers computed before: one full sort per row, a position kept while the mass before it is
    under top_p (ties in the order the sort happens to give them)."""
    sp, idx = p.sort(dim=-1, descending=True)
    keep_sorted = (sp.cumsum(-1) - sp) < top_p
    return torch.zeros_like(keep_sorted).scatter_(-1, idx, keep_sorted)


def edge_is_tied(p: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    """Rows where a dropped token has the smallest kept probability (so a sort's tie order decides)."""
    smallest_kept = p.masked_fill(~keep, float("inf")).amin(-1, keepdim=True)
    return ((p == smallest_kept) & ~keep).any(-1)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_the_partial_sort_keeps_what_a_full_sort_keeps(dtype):
    """Short nuclei (inside the top 64) and long ones (sorted in full) in one call, several temperatures."""
    g = torch.Generator().manual_seed(0)
    logits = torch.cat([torch.randn(300, 2688, generator=g, dtype=torch.float64) * s for s in (0.3, 1.0, 3.0, 8.0)])
    p = logits.to(dtype).softmax(-1)
    for top_p in (0.3, 0.9, 0.95, 0.999):
        want = full_sort_mask(p, top_p)
        got = nucleus(p, top_p)
        tied = edge_is_tied(p, want)
        assert torch.equal(got[~tied], want[~tied])
        assert tied.sum() <= 3  # ties at the edge are rare in real probabilities ...
        assert torch.all(got[tied] >= want[tied])  # ... and there the whole tie is kept
        sizes = got.sum(-1)
        if top_p == 0.9:
            assert (sizes <= 64).sum() > 100 and (sizes > 64).sum() > 100  # both paths ran
        assert torch.equal(nucleus(p, top_p, k=1), got) and torch.equal(nucleus(p, top_p, k=5000), got)


def test_the_nucleus_is_the_smallest_prefix_reaching_top_p_and_keeps_a_tie_whole():
    p = torch.tensor([[0.4, 0.35, 0.25], [0.3, 0.4, 0.3], [1.0, 0.0, 0.0], [0.2, 0.5, 0.3]])
    assert nucleus(p, 0.5).tolist() == [[True, True, False], [True, True, True], [True, False, False],
                                        [False, True, False]]
    assert nucleus(p, 0.4).tolist() == [[True, False, False], [False, True, False], [True, False, False],
                                        [False, True, False]]
    # batch dimensions, a view that is not contiguous, and the expanded rows the trainer passes
    q = p.t().contiguous().t()
    assert torch.equal(nucleus(q, 0.5), nucleus(p, 0.5))
    assert torch.equal(nucleus(p[None].expand(3, -1, -1), 0.5), nucleus(p, 0.5).expand(3, -1, -1))


def test_tempered_logprobs_renormalise_over_the_partial_sort_nucleus():
    g = torch.Generator().manual_seed(1)
    logits = torch.randn(64, 2688, generator=g) * 4
    targets = torch.randint(0, 2688, (64,), generator=g)
    z = logits / 0.7
    logp = torch.log_softmax(z, -1)
    keep = full_sort_mask(logp.exp(), 0.9)
    assert not edge_is_tied(logp.exp(), keep).any()
    keep.scatter_(-1, targets[:, None], True)
    masked = logp.masked_fill(~keep, float("-inf"))
    want = (masked - torch.logsumexp(masked, -1, keepdim=True)).gather(-1, targets[:, None]).squeeze(-1)
    assert torch.equal(tempered_logprobs(logits, targets, 0.7, 0.9), want)
