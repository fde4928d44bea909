// RELAXPS_VECTOR_CLONES: put before a loop function (free, with __restrict
// parameters: GCC honours restrict reliably only on parameters) to build an
// AVX2 copy next to the baseline (SSE2) one, picked at load time. The AVX2
// target has no FMA, so both copies round identically: results do not
// depend on the CPU.
//
// Empty under TSan: the clones' ifunc resolvers run during relocation, before
// the TSan runtime is initialized, and its instrumentation of them crashes
// every binary at load.
#ifndef RELAXPS_COMMON_VECTOR_CLONES_H_
#define RELAXPS_COMMON_VECTOR_CLONES_H_

#if defined(__x86_64__) && defined(__has_attribute) && !defined(__SANITIZE_THREAD__)
#if __has_attribute(target_clones)
#define RELAXPS_VECTOR_CLONES __attribute__((target_clones("avx2", "default")))
#endif
#endif
#ifndef RELAXPS_VECTOR_CLONES
#define RELAXPS_VECTOR_CLONES
#endif

#endif  // RELAXPS_COMMON_VECTOR_CLONES_H_
