// The fast sampler's decode step (proposer/backends/fast_sampler.py `_step`) in C++: the same ATen operators,
// in the same order on the same tensors, so the same bits, without the interpreter between them. At a decode
// step's 8 rows each of the step's ~870 operators takes a few microseconds, and the Python around each call was
// a sixth of the step on the 2-core machines here (docs/TRAINING.md). Built on first use by
// proposer/backends/native_step.py (torch.utils.cpp_extension); where it cannot be built the Python step runs.
#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <tuple>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace {

using at::indexing::None;
using at::indexing::Slice;

// ---- The `native` products (fast_sampler.choose_products): x (M, K) @ W^T for a decode step's few rows.
// MKL and oneDNN run these shapes at a fraction of the machine's FLOP rate on the AMD EPYC here (8 rows: ~40
// GFLOP/s of ~107); this kernel keeps 8 rows x 16*NV columns of sums in AVX-512 registers and streams W^T once,
// packed in panels (N / NB, K, NB) of NB = 16*NV columns, NV in {3, 2, 1} the largest that divides N. One
// path on every AVX-512 CPU, so the same bits on each; fused multiply-adds, so not the bits of MKL or oneDNN.

bool avx512() {
#if defined(__x86_64__)
  return __builtin_cpu_supports("avx512f");
#else
  return false;
#endif
}

at::Tensor pack(const at::Tensor& wt) {
  TORCH_CHECK(wt.dim() == 2 && wt.scalar_type() == at::kFloat && wt.device().is_cpu(),
              "vevo::pack: W^T must be a 2-D fp32 CPU tensor");
  int64_t k = wt.size(0), n = wt.size(1);
  TORCH_CHECK(n % 16 == 0, "vevo::pack: the output width must be a multiple of 16, got ", n);
  int64_t nb = n % 48 == 0 ? 48 : n % 32 == 0 ? 32 : 16;
  auto w = wt.t();  // W (N, K): the sampler passes W^T as a view of the model's W, so one copy moves it into panels
  if (w.is_contiguous()) return w.view({n / nb, nb, k}).transpose(1, 2).contiguous();
  return wt.contiguous().view({k, n / nb, nb}).permute({1, 0, 2}).contiguous();
}

#if defined(__x86_64__)
template <int MR, int NV>
__attribute__((target("avx512f"))) void panel(const float* x, int64_t k, const float* w, float* out, int64_t ldo) {
  constexpr int NB = 16 * NV;
  __m512 acc[MR][NV];
  for (int m = 0; m < MR; ++m)
    for (int j = 0; j < NV; ++j) acc[m][j] = _mm512_setzero_ps();
  for (int64_t i = 0; i < k; ++i) {
    __m512 wv[NV];
    for (int j = 0; j < NV; ++j) wv[j] = _mm512_loadu_ps(w + i * NB + 16 * j);
    for (int m = 0; m < MR; ++m) {
      __m512 b = _mm512_set1_ps(x[m * k + i]);
      for (int j = 0; j < NV; ++j) acc[m][j] = _mm512_fmadd_ps(b, wv[j], acc[m][j]);
    }
  }
  for (int m = 0; m < MR; ++m)
    for (int j = 0; j < NV; ++j) _mm512_storeu_ps(out + m * ldo + 16 * j, acc[m][j]);
}

template <int MR>
void rows_panel(const float* x, int64_t k, const float* wp, int64_t n, int64_t nb, float* out) {
  if (nb == 48) panel<MR, 3>(x, k, wp, out, n);
  else if (nb == 32) panel<MR, 2>(x, k, wp, out, n);
  else panel<MR, 1>(x, k, wp, out, n);
}
#endif

// x (M, K) @ the packed W^T (+ bias): rows in blocks of 8.
at::Tensor native_linear(const at::Tensor& x_in, const at::Tensor& packed, const std::optional<at::Tensor>& b) {
  TORCH_CHECK(avx512(), "vevo::linear: this CPU has no AVX-512");
  TORCH_CHECK(packed.dim() == 3 && x_in.dim() == 2 && x_in.size(1) == packed.size(1) &&
                  x_in.scalar_type() == at::kFloat && packed.scalar_type() == at::kFloat && packed.is_contiguous(),
              "vevo::linear: x (M, K) and a packed fp32 weight (N / NB, K, NB) expected");
  auto x = x_in.contiguous();
  int64_t m_all = x.size(0), k = x.size(1), nb = packed.size(2), n = packed.size(0) * nb;
  auto out = at::empty({m_all, n}, x.options());
#if defined(__x86_64__)
  const float* xp = x.data_ptr<float>();
  const float* wp = packed.data_ptr<float>();
  float* op = out.data_ptr<float>();
  for (int64_t p = 0; p < n / nb; ++p) {  // a panel stays in cache while every block of rows reads it
    const float* w = wp + p * k * nb;
    for (int64_t m0 = 0; m0 < m_all; m0 += 8) {
      const float* xs = xp + m0 * k;
      float* os = op + m0 * n + p * nb;
      switch (std::min<int64_t>(8, m_all - m0)) {
        case 8: rows_panel<8>(xs, k, w, n, nb, os); break;
        case 7: rows_panel<7>(xs, k, w, n, nb, os); break;
        case 6: rows_panel<6>(xs, k, w, n, nb, os); break;
        case 5: rows_panel<5>(xs, k, w, n, nb, os); break;
        case 4: rows_panel<4>(xs, k, w, n, nb, os); break;
        case 3: rows_panel<3>(xs, k, w, n, nb, os); break;
        case 2: rows_panel<2>(xs, k, w, n, nb, os); break;
        default: rows_panel<1>(xs, k, w, n, nb, os); break;
      }
    }
  }
#endif
  if (b.has_value()) out.add_(*b);
  return out;
}

// ---- The `native` shared-prompt attention (_shared_prefix_attention's values, to fp32's noise): one query
// per row over [the group's prompt ; the row's own tokens], the scores and the weighted sum in AVX-512 loops
// around ATen's softmax. bmm ran these batches of one query at a sixth of a step from a cold cache; here each
// row's own keys and values are read once, in order. head_dim a multiple of 16, at most 128.
#if defined(__x86_64__)
template <int NV>
__attribute__((target("avx512f"))) void scores(const at::Tensor& q, const at::Tensor& pk, const at::Tensor& keys,
                                                int64_t t, float* s) {
  int64_t rows = q.size(0), h = q.size(1), d = q.size(2), hkv = pk.size(0), n_p = pk.size(1), g = h / hkv;
  int64_t cap = keys.size(2), n = n_p + t;
  const float* qp = q.data_ptr<float>();
  const float* pkp = pk.data_ptr<float>();
  const float* kp = keys.data_ptr<float>();
  __m512 scale = _mm512_set1_ps(static_cast<float>(std::pow(static_cast<double>(d), -0.5)));
  for (int64_t kh = 0; kh < hkv; ++kh)
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t gi = 0; gi < g; ++gi) {
        int64_t head = kh * g + gi;
        const float* qr = qp + r * q.stride(0) + head * q.stride(1);
        __m512 qv[NV];
        for (int v = 0; v < NV; ++v) qv[v] = _mm512_mul_ps(_mm512_loadu_ps(qr + 16 * v), scale);
        float* out = s + (r * h + head) * n;
        for (int64_t j = 0; j < n; ++j) {
          const float* k = j < n_p ? pkp + kh * pk.stride(0) + j * pk.stride(1)
                                   : kp + ((kh * rows + r) * cap + (j - n_p)) * d;
          __m512 acc = _mm512_mul_ps(qv[0], _mm512_loadu_ps(k));
          for (int v = 1; v < NV; ++v) acc = _mm512_fmadd_ps(qv[v], _mm512_loadu_ps(k + 16 * v), acc);
          out[j] = _mm512_reduce_add_ps(acc);
        }
      }
}

template <int NV>
__attribute__((target("avx512f"))) void weighted(const float* a, const at::Tensor& pv, const at::Tensor& vals,
                                                  int64_t rows, int64_t h, int64_t t, float* o) {
  int64_t hkv = pv.size(0), n_p = pv.size(1), d = pv.size(2), g = h / hkv, cap = vals.size(2), n = n_p + t;
  const float* pvp = pv.data_ptr<float>();
  const float* vp = vals.data_ptr<float>();
  for (int64_t kh = 0; kh < hkv; ++kh)
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t gi = 0; gi < g; ++gi) {
        int64_t head = kh * g + gi;
        const float* ar = a + (r * h + head) * n;
        __m512 acc[NV];
        for (int v = 0; v < NV; ++v) acc[v] = _mm512_setzero_ps();
        for (int64_t j = 0; j < n; ++j) {
          const float* x = j < n_p ? pvp + kh * pv.stride(0) + j * pv.stride(1)
                                   : vp + ((kh * rows + r) * cap + (j - n_p)) * d;
          __m512 w = _mm512_set1_ps(ar[j]);
          for (int v = 0; v < NV; ++v) acc[v] = _mm512_fmadd_ps(w, _mm512_loadu_ps(x + 16 * v), acc[v]);
        }
        float* out = o + r * h * d + head * d;
        for (int v = 0; v < NV; ++v) _mm512_storeu_ps(out + 16 * v, acc[v]);
      }
}
#endif

// q (rows, H, D); pk, pv (Hkv, P, D), D unit stride; keys, vals the cache (Hkv, rows, capacity, D), contiguous,
// its first t columns written. -> (rows, H * D).
at::Tensor native_attention(const at::Tensor& q, const at::Tensor& pk, const at::Tensor& pv, const at::Tensor& keys,
                            const at::Tensor& vals, int64_t t) {
  TORCH_CHECK(avx512(), "vevo::prefix_attention: this CPU has no AVX-512");
  int64_t rows = q.size(0), h = q.size(1), d = q.size(2);
  bool ok = q.dim() == 3 && pk.dim() == 3 && pv.dim() == 3 && keys.dim() == 4 && vals.dim() == 4 &&
            d % 16 == 0 && d <= 128 && h % pk.size(0) == 0 && pk.sizes() == pv.sizes() && pk.size(2) == d &&
            keys.sizes() == vals.sizes() && keys.size(0) == pk.size(0) && keys.size(1) == rows &&
            keys.size(3) == d && t >= 1 && t <= keys.size(2) && keys.is_contiguous() && vals.is_contiguous() &&
            q.stride(2) == 1 && pk.stride(2) == 1 && pv.stride(2) == 1;
  for (const at::Tensor* x : {&q, &pk, &pv, &keys, &vals}) ok = ok && x->scalar_type() == at::kFloat;
  TORCH_CHECK(ok, "vevo::prefix_attention: fp32 q (rows, H, D), prompt (Hkv, P, D) and cache (Hkv, rows, T, D) "
                  "expected, D a multiple of 16 up to 128");
  int64_t n = pk.size(1) + t;
  auto s = at::empty({rows, h, n}, q.options());
  auto out = at::empty({rows, h * d}, q.options());
#if defined(__x86_64__)
  switch (d / 16) {
    case 1: scores<1>(q, pk, keys, t, s.data_ptr<float>()); break;
    case 2: scores<2>(q, pk, keys, t, s.data_ptr<float>()); break;
    case 3: scores<3>(q, pk, keys, t, s.data_ptr<float>()); break;
    case 4: scores<4>(q, pk, keys, t, s.data_ptr<float>()); break;
    case 5: scores<5>(q, pk, keys, t, s.data_ptr<float>()); break;
    case 6: scores<6>(q, pk, keys, t, s.data_ptr<float>()); break;
    case 7: scores<7>(q, pk, keys, t, s.data_ptr<float>()); break;
    default: scores<8>(q, pk, keys, t, s.data_ptr<float>()); break;
  }
  auto a = s.softmax(-1);
  const float* ap = a.data_ptr<float>();
  float* op = out.data_ptr<float>();
  switch (d / 16) {
    case 1: weighted<1>(ap, pv, vals, rows, h, t, op); break;
    case 2: weighted<2>(ap, pv, vals, rows, h, t, op); break;
    case 3: weighted<3>(ap, pv, vals, rows, h, t, op); break;
    case 4: weighted<4>(ap, pv, vals, rows, h, t, op); break;
    case 5: weighted<5>(ap, pv, vals, rows, h, t, op); break;
    case 6: weighted<6>(ap, pv, vals, rows, h, t, op); break;
    case 7: weighted<7>(ap, pv, vals, rows, h, t, op); break;
    default: weighted<8>(ap, pv, vals, rows, h, t, op); break;
  }
#endif
  return out;
}

// _lin: a weight packed here (3-D) runs native_linear, one packed by oneDNN its linear operator, a
// pre-transposed one torch.mm / addmm.
at::Tensor lin(const at::Tensor& x, const at::Tensor& wt, const std::optional<at::Tensor>& b) {
  if (wt.dim() == 3) return native_linear(x, wt, b);
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
                int64_t nh, int64_t nkv, int64_t hd, const at::Tensor& n_t, const at::Tensor& eps_t,
                bool own_attention) {
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
      if (own_attention)
        a = native_attention(qk.index({Slice(), Slice(None, nh)}), prefix_k[li], prefix_v[li], kc, vc, at_ + 1);
      else
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

// ---- The trainer's RMSNorm (proposer/backends/fast_logprobs.py `_RmsNorm`), forward and backward in one pass
// over a row each, where autograd through the ATen operators (pow, mean, add, rsqrt, two products, and their
// backwards) made ~15 passes over the activations: 0.93 ms a norm at a campaign group's 465 x 256, 13 norms a
// step. The gain is frozen (a LoRA's base): no gradient for it. Sums in AVX-512 lanes where the width is a
// multiple of 16, else in order; so not ATen's bits (its reduction is blocked another way), the same function.

__attribute__((target("avx512f"))) float dot16(const float* a, const float* b, int64_t n) {
  __m512 acc = _mm512_setzero_ps();
  for (int64_t i = 0; i < n; i += 16) acc = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), acc);
  return _mm512_reduce_add_ps(acc);
}

float dot(const float* a, const float* b, int64_t n, bool wide) {
  if (wide) return dot16(a, b, n);
  float s = 0.0f;
  for (int64_t i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

void check_norm(const at::Tensor& x, const at::Tensor& w) {
  TORCH_CHECK(x.dim() == 2 && x.is_contiguous() && x.scalar_type() == at::kFloat && x.device().is_cpu(),
              "vevo::rms_norm: x must be a contiguous 2-D fp32 CPU tensor");
  TORCH_CHECK(w.dim() == 1 && w.is_contiguous() && w.scalar_type() == at::kFloat && w.size(0) == x.size(1),
              "vevo::rms_norm: the gain must be fp32, one per column of x");
}

// y = w * x * r, r = 1 / sqrt(mean(x^2) + eps) per row; returns (y, r)
std::tuple<at::Tensor, at::Tensor> rms_norm(const at::Tensor& x, const at::Tensor& w, double eps) {
  check_norm(x, w);
  int64_t rows = x.size(0), n = x.size(1);
  bool wide = avx512() && n % 16 == 0;
  auto y = at::empty_like(x);
  auto r = at::empty({rows, 1}, x.options());
  const float *xp = x.data_ptr<float>(), *wp = w.data_ptr<float>();
  float *yp = y.data_ptr<float>(), *rp = r.data_ptr<float>();
  for (int64_t i = 0; i < rows; ++i) {
    const float* xi = xp + i * n;
    float ri = 1.0f / std::sqrt(dot(xi, xi, n, wide) / static_cast<float>(n) + static_cast<float>(eps));
    rp[i] = ri;
    float* yi = yp + i * n;
    for (int64_t j = 0; j < n; ++j) yi[j] = wp[j] * (xi[j] * ri);
  }
  return {y, r};
}

// dx = r * g - x * r^3 * mean(g * x), g = dy * w
at::Tensor rms_norm_backward(const at::Tensor& dy, const at::Tensor& x, const at::Tensor& w, const at::Tensor& r) {
  check_norm(x, w);
  TORCH_CHECK(dy.sizes() == x.sizes() && dy.scalar_type() == at::kFloat, "vevo::rms_norm_backward: dy as x");
  auto dyc = dy.contiguous();
  int64_t rows = x.size(0), n = x.size(1);
  bool wide = avx512() && n % 16 == 0;
  auto dx = at::empty_like(x);
  auto g = at::empty({n}, x.options());
  const float *xp = x.data_ptr<float>(), *wp = w.data_ptr<float>(), *dp = dyc.data_ptr<float>(),
              *rp = r.data_ptr<float>();
  float *gp = g.data_ptr<float>(), *op = dx.data_ptr<float>();
  for (int64_t i = 0; i < rows; ++i) {
    const float *xi = xp + i * n, *di = dp + i * n;
    for (int64_t j = 0; j < n; ++j) gp[j] = di[j] * wp[j];
    float ri = rp[i];
    float c = dot(gp, xi, n, wide) / static_cast<float>(n) * ri * ri * ri;
    float* oi = op + i * n;
    for (int64_t j = 0; j < n; ++j) oi[j] = ri * gp[j] - xi[j] * c;
  }
  return dx;
}

// ---- The trainer's SwiGLU (silu(g) * u) and RoPE (fast_logprobs `_SwiGlu`, `_Rope`), forward and backward each
// one pass, where autograd made 2 and 3 passes (SwiGLU) and 4 and 4 (RoPE) over the activations, each a tensor of
// its own: at a campaign group's 465 rows, 1.02 ms a layer's SwiGLU forward and backward and 0.23 ms a RoPE. Only
// with AVX-512 (the callers check `avx512()`): exp in 16 lanes here, where a scalar exp would be slower than ATen.

void check_rows(const at::Tensor& x, const char* what) {
  TORCH_CHECK(x.is_contiguous() && x.scalar_type() == at::kFloat && x.device().is_cpu(), what,
              ": the tensors must be contiguous fp32 CPU tensors");
}

// e^x in 16 lanes: x = n ln2 + r, |r| <= ln2 / 2, e^r by Cephes' expf polynomial (~1 ulp), times 2^n by scalef
// (which gives inf or 0 for an n out of range, and NaN for NaN).
__attribute__((target("avx512f"))) __m512 exp16(__m512 x) {
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 y = _mm512_set1_ps(1.9875691500e-4f);
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(1.3981999507e-3f));
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(8.3334519073e-3f));
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(4.1665795894e-2f));
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(1.6666665459e-1f));
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(5.0000001201e-1f));
  y = _mm512_fmadd_ps(y, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  return _mm512_scalef_ps(y, n);
}

__attribute__((target("avx512f"))) __m512 sigmoid16(__m512 x) {
  const __m512 one = _mm512_set1_ps(1.0f);
  return _mm512_div_ps(one, _mm512_add_ps(one, exp16(_mm512_sub_ps(_mm512_setzero_ps(), x))));
}

float sigmoid1(float x) { return 1.0f / (1.0f + std::exp(-x)); }

// y = silu(g) * u = g sigmoid(g) u
__attribute__((target("avx512f"))) at::Tensor swiglu(const at::Tensor& g, const at::Tensor& u) {
  check_rows(g, "vevo::swiglu");
  check_rows(u, "vevo::swiglu");
  TORCH_CHECK(g.sizes() == u.sizes(), "vevo::swiglu: g and u differ in shape");
  auto y = at::empty_like(g);
  const float *gp = g.data_ptr<float>(), *up = u.data_ptr<float>();
  float* yp = y.data_ptr<float>();
  int64_t n = g.numel(), i = 0;
  for (; i + 16 <= n; i += 16) {
    __m512 a = _mm512_loadu_ps(gp + i);
    _mm512_storeu_ps(yp + i, _mm512_mul_ps(_mm512_mul_ps(a, sigmoid16(a)), _mm512_loadu_ps(up + i)));
  }
  for (; i < n; ++i) yp[i] = gp[i] * sigmoid1(gp[i]) * up[i];
  return y;
}

// dg = dy u s (1 + g (1 - s)), du = dy g s, with s = sigmoid(g)
__attribute__((target("avx512f"))) std::tuple<at::Tensor, at::Tensor> swiglu_backward(
    const at::Tensor& dy, const at::Tensor& g, const at::Tensor& u) {
  check_rows(dy, "vevo::swiglu_backward");
  check_rows(g, "vevo::swiglu_backward");
  check_rows(u, "vevo::swiglu_backward");
  TORCH_CHECK(dy.sizes() == g.sizes() && g.sizes() == u.sizes(), "vevo::swiglu_backward: shapes differ");
  auto dg = at::empty_like(g), du = at::empty_like(u);
  const float *dp = dy.data_ptr<float>(), *gp = g.data_ptr<float>(), *up = u.data_ptr<float>();
  float *dgp = dg.data_ptr<float>(), *dup = du.data_ptr<float>();
  int64_t n = g.numel(), i = 0;
  const __m512 one = _mm512_set1_ps(1.0f);
  for (; i + 16 <= n; i += 16) {
    __m512 a = _mm512_loadu_ps(gp + i), d = _mm512_loadu_ps(dp + i), s = sigmoid16(a);
    __m512 ds = _mm512_mul_ps(d, s);
    _mm512_storeu_ps(dup + i, _mm512_mul_ps(ds, a));
    __m512 t = _mm512_fmadd_ps(a, _mm512_sub_ps(one, s), one);
    _mm512_storeu_ps(dgp + i, _mm512_mul_ps(_mm512_mul_ps(ds, _mm512_loadu_ps(up + i)), t));
  }
  for (; i < n; ++i) {
    float s = sigmoid1(gp[i]), ds = dp[i] * s;
    dup[i] = ds * gp[i];
    dgp[i] = ds * up[i] * (1.0f + gp[i] * (1.0f - s));
  }
  return {dg, du};
}

// RoPE of x (N, heads, d) with cos and sin (N, 1, d) as `rope_tables` makes them (the sin's first half negated):
// y = x cos + roll(x, d/2) sin. Its backward is the transpose: dx = dy cos + roll(dy sin, d/2).
void check_rope(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin, const char* what) {
  check_rows(x, what);
  check_rows(cos, what);
  check_rows(sin, what);
  TORCH_CHECK(x.dim() == 3 && x.size(2) % 2 == 0 && cos.dim() == 3 && cos.sizes() == sin.sizes() &&
                  cos.size(0) == x.size(0) && cos.size(1) == 1 && cos.size(2) == x.size(2),
              what, ": x (N, heads, d) with d even, cos and sin (N, 1, d)");
}

__attribute__((target("avx512f"))) at::Tensor rope_rows(const at::Tensor& x, const at::Tensor& cos,
                                                          const at::Tensor& sin, bool backward) {
  check_rope(x, cos, sin, backward ? "vevo::rope_backward" : "vevo::rope");
  int64_t rows = x.size(0), heads = x.size(1), d = x.size(2), half = d / 2;
  auto y = at::empty_like(x);
  const float *xp = x.data_ptr<float>(), *cp = cos.data_ptr<float>(), *sp = sin.data_ptr<float>();
  float* yp = y.data_ptr<float>();
  for (int64_t i = 0; i < rows; ++i) {
    // lane j's partner across the half is j + d/2 (first half) or j - d/2; the forward multiplies it by sin[j],
    // the backward by the partner's sin
    const float *c = cp + i * d, *s = sp + i * d;
    const float *s1 = backward ? s + half : s, *s2 = backward ? s - half : s;
    for (int64_t h = 0; h < heads; ++h) {
      const float* xi = xp + (i * heads + h) * d;
      float* yi = yp + (i * heads + h) * d;
      for (int64_t j = 0; j < half; ++j) yi[j] = xi[j] * c[j] + xi[j + half] * s1[j];
      for (int64_t j = half; j < d; ++j) yi[j] = xi[j] * c[j] + xi[j - half] * s2[j];
    }
  }
  return y;
}

at::Tensor rope_forward(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  return rope_rows(x, cos, sin, false);
}

at::Tensor rope_backward(const at::Tensor& dy, const at::Tensor& cos, const at::Tensor& sin) {
  return rope_rows(dy, cos, sin, true);
}

// ---- The trainer's attention for a group (fast_logprobs `_Attention`): the prompt's rows causal over the prompt,
// each completion's rows over the prompt's keys and their own, causal; rows packed as group_logprobs packs them
// (the prompt's p rows, then each completion's in turn). One call a layer, forward and backward, where SDPA ran a
// call per completion (each ~0.15 ms forward and ~0.3 ms backward at a campaign group's sizes, most of it not
// arithmetic) and the prompt's keys were concatenated to each completion's. The softmax rows are kept for the
// backward (~0.7 MB a layer for a campaign group). head_dim a multiple of 16 (the callers check).

// the offset of row t's softmax entries (its keys: pre + t + 1) within its segment's block of one head
inline int64_t row_offset(int64_t pre, int64_t t) { return t * pre + t * (t + 1) / 2; }

struct Segments {
  std::vector<int64_t> first, rows, prefix;  // per segment: its first row, its rows, the prompt keys it sees first
  int64_t probs = 0;                         // softmax entries of one head, all segments
  Segments(int64_t p, at::IntArrayRef sizes) {
    int64_t at = 0;
    auto add = [&](int64_t n, int64_t pre) {
      first.push_back(at);
      rows.push_back(n);
      prefix.push_back(pre);
      probs += row_offset(pre, n);
      at += n;
    };
    add(p, 0);  // the prompt: its own rows are its keys
    for (int64_t n : sizes) add(n, p);
  }
  int64_t key_row(size_t s, int64_t j) const { return j < prefix[s] ? j : first[s] + j - prefix[s]; }
};

void check_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, int64_t p,
                     at::IntArrayRef sizes) {
  for (const auto* t : {&q, &k, &v}) check_rows(*t, "vevo::attention");
  TORCH_CHECK(q.dim() == 3 && k.dim() == 3 && k.sizes() == v.sizes() && k.size(0) == q.size(0) &&
                  k.size(2) == q.size(2) && q.size(1) % k.size(1) == 0 && q.size(2) % 16 == 0,
              "vevo::attention: q (N, heads, d), k and v (N, kv_heads, d), d a multiple of 16");
  int64_t total = p;
  for (int64_t n : sizes) {
    TORCH_CHECK(n >= 0, "vevo::attention: a negative size");
    total += n;
  }
  TORCH_CHECK(p >= 1 && total == q.size(0), "vevo::attention: the prompt's rows and the sizes must sum to N");
}

// K^T of segment s's keys for kv head kh: (d, NK) in a row stride of ld (NK rounded up to 16, the tail zeroed)
void transpose_keys(const float* kp, const Segments& seg, size_t s, int64_t kh, int64_t hkv, int64_t d,
                    int64_t ld, float* kt) {
  const int64_t nk = seg.prefix[s] + seg.rows[s];
  for (int64_t j = 0; j < nk; ++j) {
    const float* kj = kp + (seg.key_row(s, j) * hkv + kh) * d;
    for (int64_t i = 0; i < d; ++i) kt[i * ld + j] = kj[i];
  }
  for (int64_t i = 0; i < d; ++i)
    for (int64_t j = nk; j < ld; ++j) kt[i * ld + j] = 0.0f;
}

// outs[r][j] = scale * (xs[r] . column j of kt) for the columns [0, n) (kt's row stride ld a multiple of 64): RB
// rows at once, four chunks of 16 columns at a time, so each load of kt feeds RB multiply-adds (kt, ~37 KB for a
// campaign group, sits in L2, whose bandwidth one load per multiply-add exceeds)
template <int RB>
__attribute__((target("avx512f"))) void rows_times(const float* const* xs, const float* kt, int64_t ld, int64_t d,
                                                   int64_t n, float scale, float* const* outs) {
  const __m512 sv = _mm512_set1_ps(scale);
  int64_t c = 0;
  for (; c + 48 < n; c += 64) {
    __m512 acc[RB][4];
    for (int r = 0; r < RB; ++r)
      for (int u = 0; u < 4; ++u) acc[r][u] = _mm512_setzero_ps();
    for (int64_t i = 0; i < d; ++i) {
      const float* row = kt + i * ld + c;
      const __m512 k0 = _mm512_loadu_ps(row), k1 = _mm512_loadu_ps(row + 16), k2 = _mm512_loadu_ps(row + 32),
                   k3 = _mm512_loadu_ps(row + 48);
      for (int r = 0; r < RB; ++r) {
        const __m512 b = _mm512_set1_ps(xs[r][i]);
        acc[r][0] = _mm512_fmadd_ps(b, k0, acc[r][0]);
        acc[r][1] = _mm512_fmadd_ps(b, k1, acc[r][1]);
        acc[r][2] = _mm512_fmadd_ps(b, k2, acc[r][2]);
        acc[r][3] = _mm512_fmadd_ps(b, k3, acc[r][3]);
      }
    }
    for (int r = 0; r < RB; ++r)
      for (int u = 0; u < 4; ++u) _mm512_storeu_ps(outs[r] + c + 16 * u, _mm512_mul_ps(acc[r][u], sv));
  }
  for (; c < n; c += 16) {  // the last columns, 16 at a time
    __m512 acc[RB];
    for (int r = 0; r < RB; ++r) acc[r] = _mm512_setzero_ps();
    for (int64_t i = 0; i < d; ++i) {
      const __m512 k0 = _mm512_loadu_ps(kt + i * ld + c);
      for (int r = 0; r < RB; ++r) acc[r] = _mm512_fmadd_ps(_mm512_set1_ps(xs[r][i]), k0, acc[r]);
    }
    for (int r = 0; r < RB; ++r) _mm512_storeu_ps(outs[r] + c, _mm512_mul_ps(acc[r], sv));
  }
}

// the softmax of sc[0..n) in place
__attribute__((target("avx512f"))) void softmax_row(float* sc, int64_t n) {
  float m = -INFINITY;
  for (int64_t j = 0; j < n; ++j) m = sc[j] > m ? sc[j] : m;
  __m512 mv = _mm512_set1_ps(m), sum = _mm512_setzero_ps();
  for (int64_t j = 0; j < n; j += 16) {
    __mmask16 k = n - j >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << (n - j)) - 1u);
    __m512 e = _mm512_maskz_mov_ps(k, exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, sc + j), mv)));
    sum = _mm512_add_ps(sum, e);
    _mm512_mask_storeu_ps(sc + j, k, e);
  }
  __m512 inv = _mm512_set1_ps(1.0f / _mm512_reduce_add_ps(sum));
  for (int64_t j = 0; j < n; j += 16) {
    __mmask16 k = n - j >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << (n - j)) - 1u);
    _mm512_mask_storeu_ps(sc + j, k, _mm512_mul_ps(_mm512_maskz_loadu_ps(k, sc + j), inv));
  }
}

// outs[r] = sum_j ws[r][j] * rows[key j] for j in [0, n) (d = 16 NV lanes), RB rows at once, their sums held in
// registers; a row's weights past its own keys are zero
template <int NV, int RB>
__attribute__((target("avx512f"))) void weighted_rows(const float* const* ws, int64_t n, const float* base,
                                                      const Segments& seg, size_t s, int64_t stride,
                                                      float* const* outs) {
  __m512 acc[RB][NV];
  for (int r = 0; r < RB; ++r)
    for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_setzero_ps();
  for (int64_t j = 0; j < n; ++j) {
    const float* x = base + seg.key_row(s, j) * stride;
    __m512 xv[NV];
    for (int v = 0; v < NV; ++v) xv[v] = _mm512_loadu_ps(x + 16 * v);
    for (int r = 0; r < RB; ++r) {
      const __m512 b = _mm512_set1_ps(ws[r][j]);
      for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_fmadd_ps(b, xv[v], acc[r][v]);
    }
  }
  for (int r = 0; r < RB; ++r)
    for (int v = 0; v < NV; ++v) _mm512_storeu_ps(outs[r] + 16 * v, acc[r][v]);
}

// rows per block of the attention kernels: RB x NV sums must stay in the 32 registers
template <int NV>
constexpr int block_rows() { return NV <= 4 ? 4 : 2; }

template <int NV>
__attribute__((target("avx512f"))) void attention_forward(const float* qp, const float* kp, const float* vp,
                                                          int64_t h, int64_t hkv, const Segments& seg, float* op,
                                                          float* pp) {
  constexpr int64_t d = 16 * NV;
  constexpr int RB = block_rows<NV>();
  const int64_t g = h / hkv;
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(d)));
  int64_t most = 0;
  for (size_t s = 0; s < seg.rows.size(); ++s) most = std::max(most, seg.prefix[s] + seg.rows[s]);
  const int64_t ld = (most + 63) / 64 * 64;
  std::vector<float> kt(d * ld), sc(RB * ld), zero(d, 0.0f), spare(RB * d);
  for (size_t s = 0; s < seg.rows.size(); ++s) {
    const int64_t rows = seg.rows[s], pre = seg.prefix[s], first = seg.first[s];
    for (int64_t hh = 0; hh < h && rows; ++hh) {
      const int64_t kh = hh / g;
      if (hh % g == 0) transpose_keys(kp, seg, s, kh, hkv, d, ld, kt.data());
      for (int64_t t0 = 0; t0 < rows; t0 += RB) {
        const int64_t rb = std::min<int64_t>(RB, rows - t0), n = pre + t0 + rb;  // the block's keys
        const float* xs[RB];
        float *outs[RB], *ws[RB];
        for (int r = 0; r < RB; ++r) {  // a block past the segment's last row fills up with zero rows
          xs[r] = r < rb ? qp + ((first + t0 + r) * h + hh) * d : zero.data();
          outs[r] = r < rb ? op + ((first + t0 + r) * h + hh) * d : spare.data() + r * d;
          ws[r] = sc.data() + r * ld;
        }
        rows_times<RB>(xs, kt.data(), ld, d, n, scale, ws);
        for (int r = 0; r < RB; ++r) {
          const int64_t nk = r < rb ? pre + t0 + r + 1 : 0;
          if (nk) softmax_row(ws[r], nk);
          std::fill(ws[r] + nk, ws[r] + n, 0.0f);
          std::copy(ws[r], ws[r] + nk, pp);
          pp += nk;
        }
        weighted_rows<NV, RB>(ws, n, vp + kh * d, seg, s, hkv * d, outs);
      }
    }
  }
}

// key j's dK and dV sums over the rows [t0, t1) of one segment and head (dS and P of each row times its q and dO)
template <int NV>
__attribute__((target("avx512f"))) inline void key_rows(const float* ds, int64_t ld, const float* pp, int64_t pre,
                                                        const float* qp, const float* dop, int64_t h, int64_t hh,
                                                        int64_t d, int64_t first, int64_t j, int64_t t0, int64_t t1,
                                                        __m512* ak, __m512* av) {
  for (int64_t t = t0; t < t1; ++t) {
    const int64_t row = first + t;
    const __m512 a = _mm512_set1_ps(ds[t * ld + j]), b = _mm512_set1_ps(pp[row_offset(pre, t) + j]);
    const float *qt = qp + (row * h + hh) * d, *dt = dop + (row * h + hh) * d;
    for (int v = 0; v < NV; ++v) {
      ak[v] = _mm512_fmadd_ps(a, _mm512_loadu_ps(qt + 16 * v), ak[v]);
      av[v] = _mm512_fmadd_ps(b, _mm512_loadu_ps(dt + 16 * v), av[v]);
    }
  }
}

// dk and dv at offset kv += the sums
template <int NV>
__attribute__((target("avx512f"))) inline void add_key(float* dkp, float* dvp, int64_t kv, const __m512* ak,
                                                       const __m512* av) {
  for (int v = 0; v < NV; ++v) {
    _mm512_storeu_ps(dkp + kv + 16 * v, _mm512_add_ps(_mm512_loadu_ps(dkp + kv + 16 * v), ak[v]));
    _mm512_storeu_ps(dvp + kv + 16 * v, _mm512_add_ps(_mm512_loadu_ps(dvp + kv + 16 * v), av[v]));
  }
}

// dV = P^T dO, dS = P (dO V^T - rowsum(dO O)), dQ = scale dS K, dK = scale dS^T Q; a kv head's gradients summed
// over the query heads that share it. Per segment and head: first each row's dS and dQ (V^T as the forward's
// K^T), then each key's dK and dV over the rows that see it, their sums in registers.
template <int NV>
__attribute__((target("avx512f"))) void attention_backward_rows(
    const float* dop, const float* qp, const float* kp, const float* vp, const float* op, const float* pp,
    int64_t h, int64_t hkv, const Segments& seg, float* dqp, float* dkp, float* dvp) {
  constexpr int64_t d = 16 * NV;
  const int64_t g = h / hkv;
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(d)));
  int64_t most = 0, most_rows = 0;
  for (size_t s = 0; s < seg.rows.size(); ++s) {
    most = std::max(most, seg.prefix[s] + seg.rows[s]);
    most_rows = std::max(most_rows, seg.rows[s]);
  }
  const int64_t ld = (most + 63) / 64 * 64;
  constexpr int RB = block_rows<NV>();
  std::vector<float> vt(d * ld), dp(RB * ld), ds((most_rows + RB) * ld), zero(d, 0.0f), spare(RB * d);
  for (size_t s = 0; s < seg.rows.size(); ++s) {
    const int64_t rows = seg.rows[s], pre = seg.prefix[s], first = seg.first[s];
    if (rows == 0) continue;
    for (int64_t hh = 0; hh < h; ++hh) {
      const int64_t kh = hh / g;
      if (hh % g == 0) transpose_keys(vp, seg, s, kh, hkv, d, ld, vt.data());
      for (int64_t t0 = 0; t0 < rows; t0 += RB) {
        const int64_t rb = std::min<int64_t>(RB, rows - t0), n = pre + t0 + rb;
        const float* dos[RB];
        float *dps[RB], *dss[RB], *dqs[RB];
        for (int r = 0; r < RB; ++r) {
          dos[r] = r < rb ? dop + ((first + t0 + r) * h + hh) * d : zero.data();
          dqs[r] = r < rb ? dqp + ((first + t0 + r) * h + hh) * d : spare.data() + r * d;
          dps[r] = dp.data() + r * ld;
          dss[r] = ds.data() + (t0 + r) * ld;
        }
        rows_times<RB>(dos, vt.data(), ld, d, n, 1.0f, dps);
        for (int r = 0; r < RB; ++r) {
          const int64_t nk = r < rb ? pre + t0 + r + 1 : 0;
          if (nk) {
            const int64_t row = first + t0 + r;
            const float *doi = dos[r], *oi = op + (row * h + hh) * d, *pi = pp + row_offset(pre, t0 + r);
            const float di = dot16(doi, oi, d);
            for (int64_t j = 0; j < nk; ++j) dss[r][j] = pi[j] * (dps[r][j] - di) * scale;
          }
          std::fill(dss[r] + nk, dss[r] + n, 0.0f);
        }
        weighted_rows<NV, RB>(dss, n, kp + kh * d, seg, s, hkv * d, dqs);
      }
      // each key j: the rows t that see it (every row for a prompt key of a completion; t >= j - pre otherwise),
      // two keys at once where the sums fit the registers (each load of a row's q and dO then feeds both)
      const int64_t keys = pre + rows;
      int64_t j = 0;
      if (NV <= 4) {
        for (; j + 1 < keys; j += 2) {
          __m512 ak[2][NV], av[2][NV];
          for (int v = 0; v < NV; ++v) ak[0][v] = av[0][v] = ak[1][v] = av[1][v] = _mm512_setzero_ps();
          int64_t t = j < pre ? 0 : j - pre;
          if (j >= pre) {  // row t sees key j but not key j + 1
            key_rows<NV>(ds.data(), ld, pp, pre, qp, dop, h, hh, d, first, j, t, t + 1, ak[0], av[0]);
            ++t;
          }
          for (; t < rows; ++t) {
            const int64_t row = first + t, at = row_offset(pre, t) + j;
            const float *qt = qp + (row * h + hh) * d, *dt = dop + (row * h + hh) * d;
            const __m512 a0 = _mm512_set1_ps(ds[t * ld + j]), a1 = _mm512_set1_ps(ds[t * ld + j + 1]),
                         b0 = _mm512_set1_ps(pp[at]), b1 = _mm512_set1_ps(pp[at + 1]);
            for (int v = 0; v < NV; ++v) {
              const __m512 qv = _mm512_loadu_ps(qt + 16 * v), dv = _mm512_loadu_ps(dt + 16 * v);
              ak[0][v] = _mm512_fmadd_ps(a0, qv, ak[0][v]);
              ak[1][v] = _mm512_fmadd_ps(a1, qv, ak[1][v]);
              av[0][v] = _mm512_fmadd_ps(b0, dv, av[0][v]);
              av[1][v] = _mm512_fmadd_ps(b1, dv, av[1][v]);
            }
          }
          for (int u = 0; u < 2; ++u) add_key<NV>(dkp, dvp, (seg.key_row(s, j + u) * hkv + kh) * d, ak[u], av[u]);
        }
      }
      for (; j < keys; ++j) {
        __m512 ak[NV], av[NV];
        for (int v = 0; v < NV; ++v) ak[v] = av[v] = _mm512_setzero_ps();
        key_rows<NV>(ds.data(), ld, pp, pre, qp, dop, h, hh, d, first, j, j < pre ? 0 : j - pre, rows, ak, av);
        add_key<NV>(dkp, dvp, (seg.key_row(s, j) * hkv + kh) * d, ak, av);
      }
      pp += row_offset(pre, rows);
    }
  }
}

// returns (out (N, heads, d), the softmax rows); d in {16, 32, 64, 128}
std::tuple<at::Tensor, at::Tensor> attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                             int64_t p, at::IntArrayRef sizes) {
  check_attention(q, k, v, p, sizes);
  const Segments seg(p, sizes);
  auto out = at::empty_like(q);
  auto probs = at::empty({q.size(1) * seg.probs}, q.options());
  const float *qp = q.data_ptr<float>(), *kp = k.data_ptr<float>(), *vp = v.data_ptr<float>();
  float *op = out.data_ptr<float>(), *pp = probs.data_ptr<float>();
  const int64_t h = q.size(1), hkv = k.size(1);
  switch (q.size(2)) {
    case 16: attention_forward<1>(qp, kp, vp, h, hkv, seg, op, pp); break;
    case 32: attention_forward<2>(qp, kp, vp, h, hkv, seg, op, pp); break;
    case 64: attention_forward<4>(qp, kp, vp, h, hkv, seg, op, pp); break;
    case 128: attention_forward<8>(qp, kp, vp, h, hkv, seg, op, pp); break;
    default: TORCH_CHECK(false, "vevo::attention: head_dim must be 16, 32, 64 or 128");
  }
  return {out, probs};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> attention_backward(
    const at::Tensor& dout, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& out,
    const at::Tensor& probs, int64_t p, at::IntArrayRef sizes) {
  check_attention(q, k, v, p, sizes);
  check_rows(dout, "vevo::attention_backward");
  check_rows(out, "vevo::attention_backward");
  check_rows(probs, "vevo::attention_backward");
  TORCH_CHECK(dout.sizes() == q.sizes() && out.sizes() == q.sizes(), "vevo::attention_backward: dout, out as q");
  const Segments seg(p, sizes);
  TORCH_CHECK(probs.numel() == q.size(1) * seg.probs, "vevo::attention_backward: softmax rows of another call");
  auto dq = at::empty_like(q);
  auto dk = at::zeros_like(k), dv = at::zeros_like(v);
  const float *qp = q.data_ptr<float>(), *kp = k.data_ptr<float>(), *vp = v.data_ptr<float>(),
              *dop = dout.data_ptr<float>(), *op = out.data_ptr<float>(), *pp = probs.data_ptr<float>();
  float *dqp = dq.data_ptr<float>(), *dkp = dk.data_ptr<float>(), *dvp = dv.data_ptr<float>();
  const int64_t h = q.size(1), hkv = k.size(1);
  switch (q.size(2)) {
    case 16: attention_backward_rows<1>(dop, qp, kp, vp, op, pp, h, hkv, seg, dqp, dkp, dvp); break;
    case 32: attention_backward_rows<2>(dop, qp, kp, vp, op, pp, h, hkv, seg, dqp, dkp, dvp); break;
    case 64: attention_backward_rows<4>(dop, qp, kp, vp, op, pp, h, hkv, seg, dqp, dkp, dvp); break;
    case 128: attention_backward_rows<8>(dop, qp, kp, vp, op, pp, h, hkv, seg, dqp, dkp, dvp); break;
    default: TORCH_CHECK(false, "vevo::attention_backward: head_dim must be 16, 32, 64 or 128");
  }
  return {dq, dk, dv};
}

}  // namespace

TORCH_LIBRARY(vevo_sampler, m) {
  m.def(
      "step(Tensor tok, Tensor cos, Tensor sin, Tensor embed, Tensor[] W, Tensor?[] B, Tensor[] K, Tensor[] V, "
      "Tensor[] prefix_k, Tensor[] prefix_v, int at, Tensor? mask, int nh, int nkv, int hd, Tensor n_t, "
      "Tensor eps_t, bool own_attention) -> Tensor",
      &step);
  m.def("linear(Tensor x, Tensor packed, Tensor? bias) -> Tensor", &native_linear);
  m.def("pack(Tensor wt) -> Tensor", &pack);
  m.def("prefix_attention(Tensor q, Tensor pk, Tensor pv, Tensor keys, Tensor vals, int t) -> Tensor",
        &native_attention);
  m.def("avx512() -> bool", &avx512);
  m.def("rms_norm(Tensor x, Tensor w, float eps) -> (Tensor, Tensor)", &rms_norm);
  m.def("rms_norm_backward(Tensor dy, Tensor x, Tensor w, Tensor r) -> Tensor", &rms_norm_backward);
  m.def("swiglu(Tensor g, Tensor u) -> Tensor", &swiglu);
  m.def("swiglu_backward(Tensor dy, Tensor g, Tensor u) -> (Tensor, Tensor)", &swiglu_backward);
  m.def("rope(Tensor x, Tensor cos, Tensor sin) -> Tensor", &rope_forward);
  m.def("rope_backward(Tensor dy, Tensor cos, Tensor sin) -> Tensor", &rope_backward);
  m.def("attention(Tensor q, Tensor k, Tensor v, int p, int[] sizes) -> (Tensor, Tensor)", &attention);
  m.def("attention_backward(Tensor dout, Tensor q, Tensor k, Tensor v, Tensor out, Tensor probs, int p, "
        "int[] sizes) -> (Tensor, Tensor, Tensor)", &attention_backward);
}
