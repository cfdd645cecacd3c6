// The contact solve at fixed modes (`_contact_solve.h`) for a batch of states in one XLA FFI call,
// one state after another: the XLA route's `_unilateral.solve_modes` on a CPU, which hands it M,
// Q and the rows. Built and registered by `_native.py`.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "_contact_solve.h"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

static ffi::Error UkContactSolveImpl(ffi::Buffer<ffi::F64> Mb, ffi::Buffer<ffi::F64> Qb, ffi::Buffer<ffi::F64> Rb,
                                     ffi::Buffer<ffi::F64> bb, ffi::Buffer<ffi::F64> closing_b,
                                     ffi::Buffer<ffi::F64> Kb, ffi::Buffer<ffi::F64> slide_b, int64_t p_eq,
                                     int64_t scales, double floor, double cut, double well,
                                     ffi::ResultBuffer<ffi::F64> x_out,
                                     ffi::ResultBuffer<ffi::F64> force_out, ffi::ResultBuffer<ffi::F64> lam_out,
                                     ffi::ResultBuffer<ffi::F64> slide_out, ffi::ResultBuffer<ffi::F64> mobility_out,
                                     ffi::ResultBuffer<ffi::F64> free_out, ffi::ResultBuffer<ffi::F64> health_out) {
  const int n = int(Qb.dimensions().back());
  const int P = int(bb.dimensions().back());
  const int k = int(slide_b.dimensions().back());
  const int64_t batch = int64_t(Qb.element_count()) / std::max(n, 1);
  // the work space, kept by each thread from one call to the next (a simulation calls this for
  // one state at a time; allocating it per state cost a tenth of a contact solve on Cassie)
  static thread_local std::vector<double> memory;
  memory.resize(contact::work_bytes(n, P, k) / sizeof(double) + 1);
  contact::Bump bump{reinterpret_cast<char*>(memory.data())};
  const contact::ContactWork work(bump, n, P, k);
  for (int64_t s = 0; s < batch; ++s)
    contact::solve(work, n, P, k, int(p_eq), Mb.typed_data() + s * n * n, Qb.typed_data() + s * n,
                   Rb.typed_data() + s * P * n, bb.typed_data() + s * P, closing_b.typed_data() + s * P,
                   Kb.typed_data() + s * n * k, slide_b.typed_data() + s * k, scales != 0, floor, cut,
                   well, x_out->typed_data() + s * n, force_out->typed_data() + s * n,
                   lam_out->typed_data() + s * P, slide_out->typed_data() + s * k,
                   mobility_out->typed_data() + s * k, free_out->typed_data() + s * k,
                   health_out->typed_data() + s * 3);
  return ffi::Error::Success();
}

XLA_FFI_DEFINE_HANDLER_SYMBOL(UkContactSolve, UkContactSolveImpl,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::Buffer<ffi::F64>>()
                                  .Arg<ffi::Buffer<ffi::F64>>()
                                  .Arg<ffi::Buffer<ffi::F64>>()
                                  .Arg<ffi::Buffer<ffi::F64>>()
                                  .Arg<ffi::Buffer<ffi::F64>>()
                                  .Arg<ffi::Buffer<ffi::F64>>()
                                  .Arg<ffi::Buffer<ffi::F64>>()
                                  .Attr<int64_t>("p")
                                  .Attr<int64_t>("scales")
                                  .Attr<double>("floor")
                                  .Attr<double>("cut")
                                  .Attr<double>("well")
                                  .Ret<ffi::Buffer<ffi::F64>>()
                                  .Ret<ffi::Buffer<ffi::F64>>()
                                  .Ret<ffi::Buffer<ffi::F64>>()
                                  .Ret<ffi::Buffer<ffi::F64>>()
                                  .Ret<ffi::Buffer<ffi::F64>>()
                                  .Ret<ffi::Buffer<ffi::F64>>()
                                  .Ret<ffi::Buffer<ffi::F64>>());
