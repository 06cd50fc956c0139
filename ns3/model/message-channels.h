// MessageChannels: messages over persistent TCP connections between ns-3 hosts, each timed
// from the moment it is queued at its sender until its last byte is read (flow completion
// time), over either Sluice's core (SluiceStack) or ns-3's own TCP (TcpSocketBase). The
// ns-3 counterpart of crates/experiments' `Flows`, so the scenarios run one workload on
// both stacks. See docs/ns3.md.
#ifndef SLUICE_NS3_MESSAGE_CHANNELS_H
#define SLUICE_NS3_MESSAGE_CHANNELS_H

#include "sluice-stack.h"

#include "ns3/callback.h"
#include "ns3/ipv4-address.h"
#include "ns3/node.h"
#include "ns3/nstime.h"
#include "ns3/socket.h"

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

namespace ns3
{

/// Persistent channels (one TCP connection each) carrying timed messages.
class MessageChannels
{
  public:
    /// Which set of flows a message is reported with.
    enum Class
    {
        /// Latency-sensitive (partition-aggregate answers, bulk flows of the dumbbell).
        FOREGROUND,
        /// Bandwidth-heavy background transfers.
        BACKGROUND,
    };

    /// A finished message.
    struct Completion
    {
        /// The channel it went on.
        uint32_t channel;
        /// Its class.
        Class cls;
        /// Its size, bytes.
        uint64_t bytes;
        /// Queued at the sender until its last byte was read.
        Time fct;
        /// When its last byte was read.
        Time end;
    };

    /// Channels over Sluice's core (`sluice`) or ns-3's TCP; listeners on `port`.
    MessageChannels(bool sluice, uint16_t port);
    ~MessageChannels();
    MessageChannels(const MessageChannels&) = delete;
    MessageChannels& operator=(const MessageChannels&) = delete;

    /// Sets ns-3's TCP defaults for `cc` (dctcp: TcpDctcp with ECN; newreno: TcpNewReno)
    /// from sluice_config_default (SACK, timestamps, minimum RTO, delayed ACKs, buffers);
    /// false with the reason for another algorithm. Call before any socket exists.
    static bool ConfigureNs3Tcp(const std::string& cc, std::string* error);

    /// Adds a host (index = order of calls): its node, its address and, for Sluice, its
    /// stack; for ns-3's TCP the node carries the Internet stack.
    uint32_t AddHost(Ptr<Node> node, Ipv4Address ip, Ptr<SluiceStack> stack);
    /// Listens on every host; call once, before any channel opens.
    bool Listen(std::string* error);
    /// A channel from host `src` to host `dst`, connecting at `start` or once the previous
    /// channel to `dst` was accepted, whichever is later (so accepts match channels in
    /// order: the C ABI does not name an accepted connection's peer). Returns its index.
    uint32_t Open(uint32_t src, uint32_t dst, Time start);
    /// Runs `cb` once when every channel is established at both ends.
    void OnAllOpen(Callback<void> cb);
    /// Queues a message of `bytes` on `channel` now, and sends what fits.
    void Send(uint32_t channel, uint64_t bytes, Class cls);

    /// Channels opened.
    uint32_t GetChannels() const;
    /// Channels established at both ends.
    uint32_t GetOpen() const;
    /// Finished messages, in completion order.
    const std::vector<Completion>& GetCompletions() const;
    /// Messages queued and not yet wholly read.
    uint64_t GetOutstanding() const;
    /// Bytes read on `channel`.
    uint64_t GetBytesRead(uint32_t channel) const;
    /// Whether every byte read so far matched the channel's pattern.
    bool IsVerified() const;
    /// The first failure ("" while none).
    const std::string& GetError() const;
    /// The first `most` channels with messages not yet read: sent/read bytes and states.
    std::string DescribeStuck(uint32_t most) const;
    /// The stack's source and destination hosts of `channel`.
    uint32_t GetSource(uint32_t channel) const;

  private:
    struct Message
    {
        uint64_t bytes;
        Time start;
        Class cls;
    };

    struct Channel
    {
        uint32_t index;
        uint32_t src;
        uint32_t dst;
        Time start;
        bool connecting{false};
        bool txOpen{false};
        bool rxOpen{false};
        sluice_conn tx{0};
        sluice_conn rx{0};
        Ptr<Socket> txSocket;
        Ptr<Socket> rxSocket;
        std::deque<Message> queue;
        uint64_t toSend{0};
        uint64_t sent{0};
        uint64_t headRead{0};
        uint64_t read{0};
    };

    struct Host
    {
        Ptr<Node> node;
        Ipv4Address ip;
        Ptr<SluiceStack> stack;
        sluice_listener listener{0};
        Ptr<Socket> listenSocket;
        /// Channels to this host not yet accepted, in connect order.
        std::deque<uint32_t> pending;
        /// The channel whose SYN is out (accepts are matched to it).
        int64_t accepting{-1};
    };

    /// Callback context: which channel or host an event is for.
    struct Ctx
    {
        MessageChannels* self;
        uint32_t index;
    };

    static void SluiceTxReady(Ctx* ctx, sluice_conn conn, uint32_t readiness);
    static void SluiceRxReady(Ctx* ctx, sluice_conn conn, uint32_t readiness);
    static void SluiceAcceptable(Ctx* ctx, sluice_listener listener);
    static void TcpConnected(Ctx* ctx, Ptr<Socket> socket);
    static void TcpConnectFailed(Ctx* ctx, Ptr<Socket> socket);
    static void TcpSendSpace(Ctx* ctx, Ptr<Socket> socket, uint32_t space);
    static void TcpAccepted(Ctx* ctx, Ptr<Socket> socket, const Address& from);
    static void TcpReadable(Ctx* ctx, Ptr<Socket> socket);

    /// Connects the next pending channel to host `dst`, if none is in progress.
    void ConnectNext(uint32_t dst);
    void Connect(uint32_t channel);
    /// The accepted end of the channel host `dst` is accepting.
    void Accepted(uint32_t dst, sluice_conn conn, Ptr<Socket> socket);
    void PumpSend(Channel& ch);
    void PumpRecv(Channel& ch);
    /// Counts `n` bytes read into `buf` on `ch`: verifies them, completes messages.
    void Consume(Channel& ch, const uint8_t* buf, size_t n);
    void Fail(const std::string& what);
    Ctx* NewCtx(uint32_t index);

    bool m_sluice;
    uint16_t m_port;
    std::vector<Host> m_hosts;
    std::vector<Channel> m_channels;
    std::vector<std::unique_ptr<Ctx>> m_ctx;
    std::vector<Completion> m_done;
    uint32_t m_open{0};
    bool m_verified{true};
    std::string m_error;
    Callback<void> m_allOpen;
    std::vector<uint8_t> m_buf;
};

} // namespace ns3

#endif // SLUICE_NS3_MESSAGE_CHANNELS_H
