// Built instead of mpi_communicator.cc when MPI is absent (e.g. a bare GPU machine):
// one process is the whole world; multi-rank runs use threads (LocalGroup).
#include <unistd.h>

#include "worker/communicator.h"

namespace tpserve {
bool HaveMpi() { return false; }
WorldConfig MpiInit(int*, char***) {
  WorldConfig w;
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  w.node = host;
  return w;
}
void MpiFinalize() {}
std::unique_ptr<Communicator> MakeMpiCommunicator() { return nullptr; }
}  // namespace tpserve
