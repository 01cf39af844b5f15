// A host thread's scratch object for a codelet (internal header).
#pragma once

namespace neurenix {

// The calling thread's T, found once per call. A thread-local variable of a
// shared library is found through a call (__tls_get_addr); a function that
// names one directly repeats that call wherever the compiler does not keep
// the address (a convolution vertex's compute had 43 such calls). Returned
// from a function that is not inlined, it is a reference the caller keeps.
// Each codelet keeps all of its buffers in one T of its own: every caller
// with the same T shares the object (the product and partial-sum vertices
// share theirs; a T such as std::vector<float> would be shared by all).
template <typename T>
[[gnu::noinline]] T& thread_scratch() {
  thread_local T scratch;
  return scratch;
}

}  // namespace neurenix
