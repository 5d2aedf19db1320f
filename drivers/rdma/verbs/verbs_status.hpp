// Completion status of a verbs work completion in rdma API terms.
// Thread-safety: pure function.
#pragma once

#include <infiniband/verbs.h>

#include "rdma/rdma.hpp"

namespace rdtx::rdma::verbs {

inline Status to_status(ibv_wc_status st) {
  switch (st) {
    case IBV_WC_SUCCESS:
      return Status::kSuccess;
    case IBV_WC_LOC_LEN_ERR:
      return Status::kLocalLengthError;
    case IBV_WC_LOC_PROT_ERR:
    case IBV_WC_LOC_ACCESS_ERR:
      return Status::kLocalProtectionError;
    case IBV_WC_REM_ACCESS_ERR:
      return Status::kRemoteAccessError;
    case IBV_WC_REM_INV_REQ_ERR:
      return Status::kRemoteInvalidRequest;
    case IBV_WC_LOC_QP_OP_ERR:
      return Status::kLocalQpOperationError;
    case IBV_WC_WR_FLUSH_ERR:
      return Status::kFlushed;
    default:
      return Status::kGeneralError;  // retry exceeded, remote operation error, ...
  }
}

}  // namespace rdtx::rdma::verbs
