// The fast sampler's decode step (proposer/backends/fast_sampler.py `_step`) in C++: the same ATen operators,
// in the same order on the same tensors, so the same bits, without the interpreter between them. At a decode
// step's 8 rows each of the step's ~870 operators takes a few microseconds, and the Python around each call was
// a sixth of the step on the 2-core machines here (docs/TRAINING.md). Built on first use by
// proposer/backends/native_step.py (torch.utils.cpp_extension); where it cannot be built the Python step runs.
#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <torch/library.h>

#include <cmath>
#include <string>

namespace {

using at::indexing::None;
using at::indexing::Slice;

// _lin: a weight packed by oneDNN runs its linear operator, a pre-transposed one torch.mm / addmm.
at::Tensor lin(const at::Tensor& x, const at::Tensor& wt, const std::optional<at::Tensor>& b) {
  if (wt.is_mkldnn()) {
    static const c10::OperatorHandle op =
        c10::Dispatcher::singleton().findSchemaOrThrow("mkldnn::_linear_pointwise", "");
    torch::jit::Stack s{x, wt, b, std::string("none"), c10::List<std::optional<at::Scalar>>(), std::string("")};
    op.callBoxed(&s);
    return s[0].toTensor();
  }
  return b.has_value() ? at::addmm(*b, x, wt) : at::mm(x, wt);
}

// _norm with the gain folded into the next linear layer.
at::Tensor norm(const at::Tensor& x, const at::Tensor& n_t, const at::Tensor& eps_t) {
  return x * (x * x).sum(-1, true).div_(n_t).add_(eps_t).rsqrt_();
}

at::Tensor rope(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  return x * cos + x.roll({x.size(-1) / 2}, {-1}) * sin;
}

// _shared_prefix_attention.
at::Tensor shared_prefix_attention(const at::Tensor& q, const at::Tensor& pk, const at::Tensor& pv,
                                   const at::Tensor& keys, const at::Tensor& vals) {
  int64_t rows = q.size(0), h = q.size(1), d = q.size(2);
  int64_t hkv = pk.size(0), n_p = pk.size(1), g = h / hkv, t = keys.size(2);
  auto qh = at::empty({hkv, rows, g, d}, q.options());
  auto qh_rows = qh.permute({1, 0, 2, 3});
  at::mul_out(qh_rows, q.view({rows, hkv, g, d}), at::Scalar(std::pow(static_cast<double>(d), -0.5)));
  auto s_p = at::bmm(qh.view({hkv, rows * g, d}), pk.transpose(1, 2));
  auto s_g = at::bmm(qh.view({hkv * rows, g, d}), keys.reshape({hkv * rows, t, d}).transpose(1, 2));
  auto att = at::cat({s_p.view({hkv, rows, g, n_p}), s_g.view({hkv, rows, g, t})}, -1);
  att = att.softmax(-1, at::promote_types(q.scalar_type(), at::kFloat)).to(q.scalar_type());
  auto out = at::bmm(att.index({"...", Slice(None, n_p)}).reshape({hkv, rows * g, n_p}), pv).view({hkv, rows, g, d}) +
             at::bmm(att.index({"...", Slice(n_p, None)}).reshape({hkv * rows, g, t}),
                     vals.reshape({hkv * rows, t, d}))
                 .view({hkv, rows, g, d});
  return out.permute({1, 0, 2, 3}).reshape({rows, h * d});
}

// _step. W and B: per layer q/k/v, o, gate/up, down, then the LM head. prefix_k/prefix_v: per layer the
// group's shared prompt (empty: the rows' own prompts are in K and V, and `mask` hides their left padding).
at::Tensor step(const at::Tensor& tok, const at::Tensor& cos, const at::Tensor& sin, const at::Tensor& embed,
                at::TensorList W, const c10::List<std::optional<at::Tensor>>& B, at::TensorList K, at::TensorList V,
                at::TensorList prefix_k, at::TensorList prefix_v, int64_t at_, const std::optional<at::Tensor>& mask,
                int64_t nh, int64_t nkv, int64_t hd, const at::Tensor& n_t, const at::Tensor& eps_t) {
  int64_t rows = tok.size(0), nq = nh * hd, nk = nkv * hd, nqk = nh + nkv;
  int64_t layers = static_cast<int64_t>(K.size());
  TORCH_CHECK(static_cast<int64_t>(W.size()) == 4 * layers + 1 && static_cast<int64_t>(B.size()) == 4 * layers + 1 &&
                  V.size() == K.size() && prefix_k.size() == prefix_v.size() &&
                  (prefix_k.empty() || static_cast<int64_t>(prefix_k.size()) == layers),
              "vevo::step: inconsistent layer lists");
  bool prefix = !prefix_k.empty();
  auto x = embed.index_select(0, tok);
  for (int64_t li = 0; li < layers; ++li) {
    auto qkv = lin(norm(x, n_t, eps_t), W[4 * li], B.get(4 * li));
    auto qk = rope(qkv.index({Slice(), Slice(None, nq + nk)}).view({rows, nqk, hd}), cos, sin);
    const at::Tensor& kc = K[li];
    const at::Tensor& vc = V[li];
    auto k = qk.index({Slice(), Slice(nh, None)});
    auto v = qkv.index({Slice(), Slice(nq + nk, None)}).view({rows, nkv, hd});
    auto upto = Slice(None, at_ + 1);
    at::Tensor a;
    if (prefix) {
      kc.select(2, at_).copy_(k.transpose(0, 1));
      vc.select(2, at_).copy_(v.transpose(0, 1));
      a = shared_prefix_attention(qk.index({Slice(), Slice(None, nh)}), prefix_k[li], prefix_v[li],
                                  kc.index({Slice(), Slice(), upto}), vc.index({Slice(), Slice(), upto}));
    } else {
      kc.select(2, at_).copy_(k);
      vc.select(2, at_).copy_(v);
      a = at::scaled_dot_product_attention(qk.index({Slice(), Slice(None, nh), None}),
                                           kc.index({Slice(), Slice(), upto}), vc.index({Slice(), Slice(), upto}),
                                           mask, 0.0, false, std::nullopt, nkv != nh)
              .view({rows, nq});
    }
    x = x + lin(a, W[4 * li + 1], B.get(4 * li + 1));
    auto gu = lin(norm(x, n_t, eps_t), W[4 * li + 2], B.get(4 * li + 2));
    int64_t half = gu.size(-1) / 2;
    x = x + lin(at::silu(gu.index({Slice(), Slice(None, half)})) * gu.index({Slice(), Slice(half, None)}),
                W[4 * li + 3], B.get(4 * li + 3));
  }
  return lin(norm(x, n_t, eps_t), W[4 * layers], B.get(4 * layers));
}

}  // namespace

TORCH_LIBRARY(vevo_sampler, m) {
  m.def(
      "step(Tensor tok, Tensor cos, Tensor sin, Tensor embed, Tensor[] W, Tensor?[] B, Tensor[] K, Tensor[] V, "
      "Tensor[] prefix_k, Tensor[] prefix_v, int at, Tensor? mask, int nh, int nkv, int hd, Tensor n_t, "
      "Tensor eps_t) -> Tensor",
      &step);
}
