// The step-marking FIFO of DCTCP's switches.
#include "step-mark-queue-disc.h"

#include "ns3/drop-tail-queue.h"
#include "ns3/log.h"
#include "ns3/object-factory.h"
#include "ns3/uinteger.h"

namespace ns3
{

NS_LOG_COMPONENT_DEFINE("SluiceStepMarkQueueDisc");
NS_OBJECT_ENSURE_REGISTERED(SluiceStepMarkQueueDisc);

TypeId
SluiceStepMarkQueueDisc::GetTypeId()
{
    static TypeId tid =
        TypeId("ns3::SluiceStepMarkQueueDisc")
            .SetParent<QueueDisc>()
            .SetGroupName("Sluice")
            .AddConstructor<SluiceStepMarkQueueDisc>()
            .AddAttribute("MaxSize",
                          "The most packets the queue holds; arrivals beyond are dropped",
                          QueueSizeValue(QueueSize("1000p")),
                          MakeQueueSizeAccessor(&QueueDisc::SetMaxSize, &QueueDisc::GetMaxSize),
                          MakeQueueSizeChecker())
            .AddAttribute("MarkThreshold",
                          "K: ECN-capable arrivals to this many queued packets or more are marked CE",
                          UintegerValue(20),
                          MakeUintegerAccessor(&SluiceStepMarkQueueDisc::m_markThreshold),
                          MakeUintegerChecker<uint32_t>());
    return tid;
}

SluiceStepMarkQueueDisc::SluiceStepMarkQueueDisc()
    : QueueDisc(QueueDiscSizePolicy::SINGLE_INTERNAL_QUEUE)
{
}

SluiceStepMarkQueueDisc::~SluiceStepMarkQueueDisc() = default;

bool
SluiceStepMarkQueueDisc::DoEnqueue(Ptr<QueueDiscItem> item)
{
    if (GetCurrentSize() + item > GetMaxSize())
    {
        DropBeforeEnqueue(item, LIMIT_EXCEEDED_DROP);
        return false;
    }
    // The instantaneous queue, not an average (RFC 8257 3.1); Mark is a no-op (false) for
    // packets that are not ECN-capable, which are queued unmarked.
    if (GetInternalQueue(0)->GetNPackets() >= m_markThreshold)
    {
        Mark(item, STEP_MARK);
    }
    return GetInternalQueue(0)->Enqueue(item);
}

Ptr<QueueDiscItem>
SluiceStepMarkQueueDisc::DoDequeue()
{
    return GetInternalQueue(0)->Dequeue();
}

bool
SluiceStepMarkQueueDisc::CheckConfig()
{
    if (GetNQueueDiscClasses() > 0 || GetNPacketFilters() > 0)
    {
        NS_LOG_ERROR("SluiceStepMarkQueueDisc takes no classes and no packet filters");
        return false;
    }
    if (GetMaxSize().GetUnit() != QueueSizeUnit::PACKETS)
    {
        NS_LOG_ERROR("SluiceStepMarkQueueDisc counts packets: give MaxSize in packets");
        return false;
    }
    if (GetNInternalQueues() == 0)
    {
        AddInternalQueue(CreateObjectWithAttributes<DropTailQueue<QueueDiscItem>>(
            "MaxSize",
            QueueSizeValue(GetMaxSize())));
    }
    return GetNInternalQueues() == 1;
}

void
SluiceStepMarkQueueDisc::InitializeParams()
{
}

} // namespace ns3
