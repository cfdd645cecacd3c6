// The library's U-K solve (`Solver` in ukjax/_robots/kernels.cc) alone, for states given as
// arrays with the batch last: the "FFI solve" route of benchmarks/batch_last.py, which measures
// it on systems whose terms the library's kernel does not model (the gripper).
#include "../../ukjax/_robots/kernels.cc"

// The solve alone for `B` states given as arrays, the batch last: M (n, n, B) of which the tree's
// pattern is read, Q (n, B), A (p, n, B), b (p, B), and M's elimination tree `parents` (n); the
// results batch first, as the library's kernel gives them.
static ffi::Error UkLanesImpl(ffi::Buffer<ffi::F64> M, ffi::Buffer<ffi::F64> Q, ffi::Buffer<ffi::F64> A,
                              ffi::Buffer<ffi::F64> b, ffi::Buffer<ffi::S64> parents, double floor, double zero_row,
                              ffi::ResultBuffer<ffi::F64> qacc, ffi::ResultBuffer<ffi::F64> force,
                              ffi::ResultBuffer<ffi::F64> health) {
  const auto dims = A.dimensions();
  const int p = int(dims[0]), n = int(dims[1]);
  const int64_t B = dims[2];
  if (B % C) return ffi::Error::InvalidArgument("the batch must be a multiple of 32");
  const double *m = M.typed_data(), *q = Q.typed_data(), *a = A.typed_data(), *bb = b.typed_data();
  std::vector<int> parent(parents.typed_data(), parents.typed_data() + n);
  Solver solver(parent, p);
  std::vector<L> E((size_t)n * n), Qc(n), Ac((size_t)p * n), bc(p);
  auto load = [&](L& to, const double* from, int64_t b0) {
    for (int l = 0; l < C; ++l) to.x[l] = from[b0 + l];
  };
  for (int64_t b0 = 0; b0 < B; b0 += C) {
    for (int c = 0; c < n; ++c) {
      load(E[(size_t)c * n + c], m + (c * n + c) * B, b0);
      for (int i : solver.anc[c]) load(E[(size_t)c * n + i], m + (c * n + i) * B, b0);
      load(Qc[c], q + c * B, b0);
    }
    for (int i = 0; i < p; ++i) {
      load(bc[i], bb + i * B, b0);
      for (int c = 0; c < n; ++c) load(Ac[(size_t)i * n + c], a + (i * n + c) * B, b0);
    }
    solver.solve(E, Qc, Ac, bc, floor, zero_row);
    solver.store(qacc->typed_data(), force->typed_data(), health->typed_data(), b0);
  }
  return ffi::Error::Success();
}

XLA_FFI_DEFINE_HANDLER_SYMBOL(UkLanes, UkLanesImpl,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::Buffer<ffi::F64>>()
                                  .Arg<ffi::Buffer<ffi::F64>>()
                                  .Arg<ffi::Buffer<ffi::F64>>()
                                  .Arg<ffi::Buffer<ffi::F64>>()
                                  .Arg<ffi::Buffer<ffi::S64>>()
                                  .Attr<double>("floor")
                                  .Attr<double>("zero_row")
                                  .Ret<ffi::Buffer<ffi::F64>>()
                                  .Ret<ffi::Buffer<ffi::F64>>()
                                  .Ret<ffi::Buffer<ffi::F64>>());

