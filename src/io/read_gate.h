// ReadGate: a cap on read I/O in flight that is shared beyond one engine (a node's store service
// hands one to every session that asks: src/service_proto/read_gate.h). An I/O engine with a gate
// takes a pass before each read span or piece it issues and gives it back once the call returned;
// writes are not gated. The gate shapes throughput only: Enter() may give up after a bounded wait
// and the read goes ahead anyway, so a gate can slow reads, never stop or change them.
//
// Thread-safety: Enter and Leave from any thread.
#pragma once

namespace rangekv {

class ReadGate {
 public:
  virtual ~ReadGate() = default;
  // Waits for a pass. True: one was taken, give it back with Leave(). False: the wait ran out
  // (the gate was full for its whole bound); read without one and do not call Leave().
  virtual bool Enter() = 0;
  virtual void Leave() = 0;
};

}  // namespace rangekv
