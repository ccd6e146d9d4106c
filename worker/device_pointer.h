// Whether a pointer is GPU memory, and the device communicators' check that they were
// given device buffers. Tested by tests/cuda_communicator_test.cc.
#pragma once

#include "absl/container/flat_hash_set.h"

namespace tpserve {

// True for device (and managed) memory; false for host memory, pinned or not. Asks the
// driver (cudaPointerGetAttributes) on every call.
bool IsDevicePointer(const void* p);

// The device communicators take device buffers only (host ones go through
// Communicator::host()). This checks it, asking the driver once per distinct pointer: a
// step's buffers are the same every step, so a collective costs a hash lookup, not a
// driver call. Host memory aborts with the call's name (a bug in the caller). One thread.
class DeviceBufferCheck {
 public:
  void Expect(const void* p, const char* call);

 private:
  absl::flat_hash_set<const void*> device_;
};

}  // namespace tpserve
