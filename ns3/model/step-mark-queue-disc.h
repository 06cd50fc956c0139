// A FIFO that marks ECN CE at a step threshold K and drops only when full: the switch of
// DCTCP (RFC 8257 3.1) and of Sluice's own simulator.
#ifndef SLUICE_NS3_STEP_MARK_QUEUE_DISC_H
#define SLUICE_NS3_STEP_MARK_QUEUE_DISC_H

#include "ns3/queue-disc.h"

#include <cstdint>

namespace ns3
{

/// FIFO queue disc: an ECN-capable packet arriving to `MarkThreshold` or more queued
/// packets is marked CE; any packet arriving to a full queue (`MaxSize`) is dropped. Unlike
/// RED with MinTh = K, packets that are not ECN-capable (SYNs, pure ACKs, non-ECN
/// congestion controls) are not dropped early.
class SluiceStepMarkQueueDisc : public QueueDisc
{
  public:
    /// The ns-3 type and its attributes.
    static TypeId GetTypeId();
    SluiceStepMarkQueueDisc();
    ~SluiceStepMarkQueueDisc() override;

    /// Why a packet was marked (QueueDisc::Stats::nMarkedPackets key).
    static constexpr const char* STEP_MARK = "Queue at or above the marking threshold";
    /// Why a packet was dropped (QueueDisc::Stats::nDroppedPacketsBeforeEnqueue key).
    static constexpr const char* LIMIT_EXCEEDED_DROP = "Queue disc limit exceeded";

  private:
    bool DoEnqueue(Ptr<QueueDiscItem> item) override;
    Ptr<QueueDiscItem> DoDequeue() override;
    bool CheckConfig() override;
    void InitializeParams() override;

    uint32_t m_markThreshold{0};
};

} // namespace ns3

#endif // SLUICE_NS3_STEP_MARK_QUEUE_DISC_H
