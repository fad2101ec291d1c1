// Clang's thread-safety annotations (clang.llvm.org/docs/ThreadSafetyAnalysis.html) as macros: which mutex
// guards a member, which a function must hold, in which order two are taken. On g++ they are empty and
// serve as documentation; clang parses them, and checks them under -Wthread-safety once the mutexes are
// of a type annotated as a capability (libstdc++'s std::mutex is not).
#pragma once

#if defined(__clang__)
#define SPACE_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define SPACE_THREAD_ANNOTATION(x)
#endif

// The member is read and written only with the mutex held.
#define SPACE_GUARDED_BY(mutex) SPACE_THREAD_ANNOTATION(guarded_by(mutex))
// The function is called with the mutex held.
#define SPACE_REQUIRES(...) SPACE_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
// This mutex is never taken while one of the others is held (they come after it).
#define SPACE_ACQUIRED_BEFORE(...) SPACE_THREAD_ANNOTATION(acquired_before(__VA_ARGS__))
