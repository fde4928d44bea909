// Clang thread-safety annotations and an annotated Mutex.
//
// GUARDED_BY(mu) on a member, REQUIRES(mu) / EXCLUDES(mu) on a method let
// clang's -Wthread-safety check the locking that comments used to promise
// (scripts/test.sh --clang-tsa builds the libraries that way). libstdc++'s
// std::mutex carries no annotations, hence Mutex / MutexLock below: thin
// wrappers with the same cost. Under GCC the macros expand to nothing.
//
// Thread-safety: Mutex is a mutex; MutexLock is a scoped lock owned by one
// thread.
#ifndef RELAXPS_COMMON_THREAD_ANNOTATIONS_H_
#define RELAXPS_COMMON_THREAD_ANNOTATIONS_H_

#include <condition_variable>
#include <mutex>

#if defined(__clang__)
#define RELAXPS_THREAD_ANNOTATION_(x) __attribute__((x))
#else
#define RELAXPS_THREAD_ANNOTATION_(x)
#endif

#define CAPABILITY(x) RELAXPS_THREAD_ANNOTATION_(capability(x))
#define SCOPED_CAPABILITY RELAXPS_THREAD_ANNOTATION_(scoped_lockable)
#define GUARDED_BY(x) RELAXPS_THREAD_ANNOTATION_(guarded_by(x))
#define PT_GUARDED_BY(x) RELAXPS_THREAD_ANNOTATION_(pt_guarded_by(x))
#define REQUIRES(...) RELAXPS_THREAD_ANNOTATION_(requires_capability(__VA_ARGS__))
#define EXCLUDES(...) RELAXPS_THREAD_ANNOTATION_(locks_excluded(__VA_ARGS__))
#define ACQUIRE(...) RELAXPS_THREAD_ANNOTATION_(acquire_capability(__VA_ARGS__))
#define RELEASE(...) RELAXPS_THREAD_ANNOTATION_(release_capability(__VA_ARGS__))
#define TRY_ACQUIRE(...) RELAXPS_THREAD_ANNOTATION_(try_acquire_capability(__VA_ARGS__))
#define NO_THREAD_SAFETY_ANALYSIS RELAXPS_THREAD_ANNOTATION_(no_thread_safety_analysis)

namespace relaxps {

// A std::mutex the analysis knows about.
class CAPABILITY("mutex") Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void Lock() ACQUIRE() { mu_.lock(); }
  void Unlock() RELEASE() { mu_.unlock(); }
  // REQUIRES: not held by the calling thread.
  bool TryLock() TRY_ACQUIRE(true) { return mu_.try_lock(); }
  // For std::condition_variable_any and std::unique_lock; prefer MutexLock.
  void lock() ACQUIRE() { mu_.lock(); }
  void unlock() RELEASE() { mu_.unlock(); }

 private:
  std::mutex mu_;
};

// Holds `mu` for its scope (std::lock_guard with annotations).
class SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex* mu) ACQUIRE(mu) : mu_(mu) { mu_->Lock(); }
  ~MutexLock() RELEASE() { mu_->Unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex* const mu_;
};

}  // namespace relaxps

#endif  // RELAXPS_COMMON_THREAD_ANNOTATIONS_H_
