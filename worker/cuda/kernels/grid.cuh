// Programmatic dependent launch (sm_90 and later; PTX griddepcontrol): the
// backend may launch a kernel while the one before it in the stream is
// still running (DeviceApi's launches with cudaLaunchAttribute
// ProgrammaticStreamSerialization, where the device has it), so that its
// launch and block scheduling overlap the tail of the one before instead
// of following it: most of a decode step's launches are a few
// microseconds, about as long as the gap between two plain launches.
//
// Every kernel entry calls strata_grid_dependency() before anything else
// (kernel_sources_test.cc checks the sources): it waits until the grids it
// depends on have completed and their memory is visible (so no read sees
// a value the kernel before has not written, and no write lands before
// the kernel before has read), then lets the next kernel launch. Below
// sm_90, and on the emulation (tests/cuda/cuda_emulator.h, which runs
// launches one after another), nothing. Every program is this file
// followed by its own (the guard: programs that join several files).
//
// Only the weights' pointers (w, table, weight, sinks: never written by a
// kernel) are `const __restrict__`: NVVM may read such memory as invariant
// through the read-only cache (ld.global.nc) and move those loads above
// the wait, which on an activation would read what the kernel before is
// still writing (kernel_sources_test.cc checks this too).
#if !defined(STRATA_GRID_DEPENDENCY)
#define STRATA_GRID_DEPENDENCY
__device__ __forceinline__ void strata_grid_dependency() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
#endif
