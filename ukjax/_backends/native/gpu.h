// The handlers for an NVIDIA GPU, one thread a member (built with nvcc, `UKJAX_CUDA`). Included
// by `kernels.cc`.
#pragma once

#include "bindings.h"

__global__ void tree_kernel(Args a, char* space, Slices plan, int64_t first, int64_t count) {
  int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= count) return;
  Carver carver = plan.carver(space, i);
  solve<double>(a, Work<double>(carver, a), first + i);
}

__global__ void contacts_kernel(Args a, Contacts c, char* space, Slices plan, int64_t first, int64_t count) {
  int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= count) return;
  Carver carver = plan.carver(space, i);
  contact::Bump bump{plan.own(space, i)};
  tree_contacts(a, c, Work<double>(carver, a), ContactScratch(bump, a.n, a.p + 3 * c.k, c.k), first + i);
}

// The stream's memory pool keeps what it holds: its default gives it back to the system at
// every synchronisation, and the next call's work space was mapped again, a third of a
// solve's time (`benchmarks/gpu.py`)
static cudaError_t keep_pool() {
  int device = 0;
  cudaError_t error = cudaGetDevice(&device);
  cudaMemPool_t pool;
  if (error == cudaSuccess) error = cudaDeviceGetDefaultMemPool(&pool, device);
  uint64_t keep = UINT64_MAX;
  if (error == cudaSuccess) error = cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep);
  return error;
}

// `launch(space, first, count, blocks)` on each slice of the batch's B members (`plan`), `blocks`
// of `THREADS` threads, one a member, in a work space from the stream's memory pool, freed in the
// stream's order after the kernels (XLA's scratch allocator refused it on jax 0.11.2)
constexpr int THREADS = 128;
template <class Launch>
static ffi::Error on_gpu(cudaStream_t stream, const Slices& plan, int64_t B, const char* name, Launch launch) {
  void* work = nullptr;
  static const cudaError_t kept = keep_pool();
  cudaError_t error = kept == cudaSuccess ? cudaMallocAsync(&work, plan.bytes, stream) : kept;
  if (error == cudaSuccess) {
    for (int64_t first = 0; first < B && error == cudaSuccess; first += plan.slice) {
      const int64_t count = std::min(plan.slice, B - first);
      launch(static_cast<char*>(work), first, count, unsigned((count + THREADS - 1) / THREADS));
      error = cudaGetLastError();
    }
    cudaError_t freed = cudaFreeAsync(work, stream);
    if (error == cudaSuccess) error = freed;
  }
  if (error != cudaSuccess) return ffi::Error::Internal(std::string(name) + ": " + cudaGetErrorString(error));
  return ffi::Error::Success();
}

static ffi::Error UkTreeCudaImpl(cudaStream_t stream, UKJAX_TREE_INPUTS, UKJAX_TREE_SOLVED) {
  Args a = arguments(UKJAX_TREE_CALL);
  a.qacc = qacc->typed_data(), a.force = force->typed_data(), a.health = health->typed_data();
  const int64_t B = qpos.dimensions()[0];
  const Slices plan = slices(a, B, space, 0);
  return on_gpu(stream, plan, B, "ukjax's tree kernel", [&](char* work, int64_t first, int64_t count, unsigned blocks) {
    tree_kernel<<<blocks, THREADS, 0, stream>>>(a, work, plan, first, count);
  });
}

XLA_FFI_DEFINE_HANDLER_SYMBOL(UkTreeCuda, UkTreeCudaImpl,
                              UKJAX_TREE_SOLVED_BINDING(ffi::Ffi::Bind().Ctx<ffi::PlatformStream<cudaStream_t>>()));

static ffi::Error UkTreeContactsCudaImpl(cudaStream_t stream, UKJAX_TREE_INPUTS, UKJAX_CONTACT_INPUTS) {
  Args a = arguments(UKJAX_TREE_CALL);
  const Contacts c = contact_arguments(a, UKJAX_CONTACT_CALL);
  const int64_t B = qpos.dimensions()[0];
  const Slices plan = slices(a, B, space, scratch_bytes(a.n, a.p + 3 * c.k, c.k));
  return on_gpu(stream, plan, B, "ukjax's contact kernel", [&](char* work, int64_t first, int64_t count, unsigned blocks) {
    contacts_kernel<<<blocks, THREADS, 0, stream>>>(a, c, work, plan, first, count);
  });
}

XLA_FFI_DEFINE_HANDLER_SYMBOL(UkTreeContactsCuda, UkTreeContactsCudaImpl,
                              UKJAX_CONTACT_BINDING(ffi::Ffi::Bind().Ctx<ffi::PlatformStream<cudaStream_t>>()));

__global__ void contact_solve_kernel(ContactSolve solve, char* space, Slices plan, int64_t first, int64_t count) {
  int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= count) return;
  contact::Bump bump{plan.own(space, i)};
  solve(contact::ContactWork(bump, solve.n, solve.P, solve.k), first + i);
}

static ffi::Error UkContactSolveCudaImpl(cudaStream_t stream, UKJAX_SOLVE_INPUTS) {
  int64_t B = 0;
  const ContactSolve solve = solve_arguments(B, UKJAX_SOLVE_CALL);
  const Slices plan = slices(0, B, space, contact::work_bytes(solve.n, solve.P, solve.k));
  return on_gpu(stream, plan, B, "ukjax's contact solve", [&](char* work, int64_t first, int64_t count, unsigned blocks) {
    contact_solve_kernel<<<blocks, THREADS, 0, stream>>>(solve, work, plan, first, count);
  });
}

XLA_FFI_DEFINE_HANDLER_SYMBOL(UkContactSolveCuda, UkContactSolveCudaImpl,
                              UKJAX_SOLVE_BINDING(ffi::Ffi::Bind().Ctx<ffi::PlatformStream<cudaStream_t>>()));
