// Whether a pointer is GPU memory: lets the communicators take host and device buffers
// through the same Communicator calls. Tested by tests/cuda_communicator_test.cc.
#pragma once

namespace tpserve {

// True for device (and managed) memory; false for host memory, pinned or not.
bool IsDevicePointer(const void* p);

}  // namespace tpserve
