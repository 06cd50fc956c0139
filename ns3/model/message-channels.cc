// MessageChannels: timed messages over persistent connections, Sluice's core or ns-3's TCP.
#include "message-channels.h"

#include "ns3/boolean.h"
#include "ns3/config.h"
#include "ns3/double.h"
#include "ns3/inet-socket-address.h"
#include "ns3/string.h"
#include "ns3/tcp-socket-base.h"
#include "ns3/uinteger.h"
#include "ns3/packet.h"
#include "ns3/simulator.h"
#include "ns3/tcp-socket-factory.h"

#include <algorithm>
#include <sstream>

namespace ns3
{

namespace
{
/// Bytes handed to a stack or read from it per call.
constexpr size_t kChunk = 64 * 1024;
} // namespace

MessageChannels::MessageChannels(bool sluice, uint16_t port)
    : m_sluice(sluice),
      m_port(port),
      m_buf(kChunk)
{
}

MessageChannels::~MessageChannels() = default;

bool
MessageChannels::ConfigureNs3Tcp(const std::string& cc, std::string* error)
{
    std::string type;
    if (cc == "dctcp")
    {
        type = "ns3::TcpDctcp";
    }
    else if (cc == "newreno" || cc == "reno")
    {
        type = "ns3::TcpNewReno";
    }
    else
    {
        *error = "ns-3's TCP here runs dctcp or newreno, not '" + cc + "'";
        return false;
    }
    // Sluice's defaults, so the two stacks differ in their models, not their settings.
    sluice_config d;
    sluice_config_default(&d);
    Config::SetDefault("ns3::TcpL4Protocol::SocketType", StringValue(type));
    Config::SetDefault("ns3::TcpSocketBase::Sack", BooleanValue(d.sack != 0));
    // ns-3 3.37's default, PRR (TcpPrrRecovery), stalls a DCTCP connection for good in the
    // leaf-spine (docs/notes/issue-22/crosscheck.md); classic recovery halves and goes on.
    Config::SetDefault("ns3::TcpL4Protocol::RecoveryType", StringValue("ns3::TcpClassicRecovery"));
    Config::SetDefault("ns3::TcpSocketBase::Timestamp", BooleanValue(d.timestamps != 0));
    // DCTCP needs ECN (RFC 8257 3.2): ECT(0) on data, the receiver echoes every CE.
    Config::SetDefault("ns3::TcpSocketBase::UseEcn", StringValue(cc == "dctcp" ? "On" : "Off"));
    Config::SetDefault("ns3::TcpSocketBase::MinRto", TimeValue(NanoSeconds(d.rto_min_ns)));
    // ns-3 rounds the RTO's variance term up to 1 ms by default; Sluice's core does not.
    Config::SetDefault("ns3::TcpSocketBase::ClockGranularity", TimeValue(NanoSeconds(1)));
    // Nagle: ns-3's TcpNoDelay stays true (no Nagle) while the core's default is Nagle on;
    // that difference is the leaf-spine's p50 gap (docs/notes/issue-22/crosscheck.md,
    // "Findings"). Not copied: with Nagle, ns-3 3.37's TCP left 1-2 of 735 leaf-spine
    // messages unfinished; run Sluice's hosts with --ns3::SluiceStack::Nagle=false instead.
    Config::SetDefault("ns3::TcpSocket::SegmentSize", UintegerValue(1448));
    Config::SetDefault("ns3::TcpSocket::InitialCwnd", UintegerValue(10));
    Config::SetDefault("ns3::TcpSocket::SndBufSize", UintegerValue(static_cast<uint32_t>(d.tx_buffer)));
    Config::SetDefault("ns3::TcpSocket::RcvBufSize", UintegerValue(static_cast<uint32_t>(d.rx_buffer)));
    Config::SetDefault("ns3::TcpSocket::DelAckCount",
                       UintegerValue(d.delayed_ack_segments == 0 ? 1 : d.delayed_ack_segments));
    Config::SetDefault("ns3::TcpSocket::DelAckTimeout",
                       TimeValue(NanoSeconds(d.delayed_ack_segments == 0 ? 0 : d.delayed_ack_timeout_ns)));
    return true;
}

MessageChannels::Ctx*
MessageChannels::NewCtx(uint32_t index)
{
    m_ctx.push_back(std::make_unique<Ctx>(Ctx{this, index}));
    return m_ctx.back().get();
}

uint32_t
MessageChannels::AddHost(Ptr<Node> node, Ipv4Address ip, Ptr<SluiceStack> stack)
{
    Host h;
    h.node = node;
    h.ip = ip;
    h.stack = stack;
    m_hosts.push_back(h);
    return static_cast<uint32_t>(m_hosts.size() - 1);
}

bool
MessageChannels::Listen(std::string* error)
{
    for (uint32_t i = 0; i < m_hosts.size(); i++)
    {
        Host& h = m_hosts[i];
        if (m_sluice)
        {
            int32_t rc = h.stack->Listen(m_port,
                                         MakeBoundCallback(&MessageChannels::SluiceAcceptable, NewCtx(i)),
                                         &h.listener);
            if (rc != SLUICE_ERROR_OK)
            {
                *error = std::string("listen: ") + sluice_strerror(rc);
                return false;
            }
        }
        else
        {
            h.listenSocket = Socket::CreateSocket(h.node, TcpSocketFactory::GetTypeId());
            if (h.listenSocket->Bind(InetSocketAddress(Ipv4Address::GetAny(), m_port)) != 0 ||
                h.listenSocket->Listen() != 0)
            {
                *error = "listen: ns-3 socket refused";
                return false;
            }
            h.listenSocket->SetAcceptCallback(
                MakeNullCallback<bool, Ptr<Socket>, const Address&>(),
                MakeBoundCallback(&MessageChannels::TcpAccepted, NewCtx(i)));
        }
    }
    return true;
}

uint32_t
MessageChannels::Open(uint32_t src, uint32_t dst, Time start)
{
    uint32_t index = static_cast<uint32_t>(m_channels.size());
    Channel ch;
    ch.index = index;
    ch.src = src;
    ch.dst = dst;
    ch.start = start;
    m_channels.push_back(ch);
    m_hosts[dst].pending.push_back(index);
    if (m_hosts[dst].pending.size() == 1 && m_hosts[dst].accepting < 0)
    {
        Simulator::Schedule(std::max(Seconds(0), start - Simulator::Now()),
                            &MessageChannels::ConnectNext,
                            this,
                            dst);
    }
    return index;
}

void
MessageChannels::ConnectNext(uint32_t dst)
{
    Host& h = m_hosts[dst];
    if (h.accepting >= 0 || h.pending.empty())
    {
        return;
    }
    uint32_t next = h.pending.front();
    Time at = m_channels[next].start;
    if (at > Simulator::Now())
    {
        Simulator::Schedule(at - Simulator::Now(), &MessageChannels::ConnectNext, this, dst);
        return;
    }
    h.pending.pop_front();
    h.accepting = next;
    Connect(next);
}

void
MessageChannels::Connect(uint32_t channel)
{
    Channel& ch = m_channels[channel];
    Host& src = m_hosts[ch.src];
    Ipv4Address remote = m_hosts[ch.dst].ip;
    ch.connecting = true;
    if (m_sluice)
    {
        int32_t rc = src.stack->Connect(remote,
                                        m_port,
                                        MakeBoundCallback(&MessageChannels::SluiceTxReady, NewCtx(channel)),
                                        &m_channels[channel].tx);
        if (rc != SLUICE_ERROR_OK)
        {
            Fail(std::string("connect: ") + sluice_strerror(rc));
        }
        return;
    }
    Ptr<Socket> s = Socket::CreateSocket(src.node, TcpSocketFactory::GetTypeId());
    ch.txSocket = s;
    Ctx* ctx = NewCtx(channel);
    s->SetConnectCallback(MakeBoundCallback(&MessageChannels::TcpConnected, ctx),
                          MakeBoundCallback(&MessageChannels::TcpConnectFailed, ctx));
    s->SetSendCallback(MakeBoundCallback(&MessageChannels::TcpSendSpace, ctx));
    if (s->Bind() != 0 || s->Connect(InetSocketAddress(remote, m_port)) != 0)
    {
        Fail("connect: ns-3 socket refused");
    }
}

void
MessageChannels::Accepted(uint32_t dst, sluice_conn conn, Ptr<Socket> socket)
{
    Host& h = m_hosts[dst];
    if (h.accepting < 0)
    {
        Fail("a connection was accepted that no channel opened");
        return;
    }
    Channel& ch = m_channels[static_cast<uint32_t>(h.accepting)];
    h.accepting = -1;
    ch.rx = conn;
    ch.rxSocket = socket;
    ch.rxOpen = true;
    if (ch.txOpen)
    {
        m_open++;
    }
    ConnectNext(dst);
    PumpRecv(ch);
    if (m_open == m_channels.size() && !m_allOpen.IsNull())
    {
        Callback<void> cb = m_allOpen;
        m_allOpen = Callback<void>();
        cb();
    }
}

void
MessageChannels::OnAllOpen(Callback<void> cb)
{
    m_allOpen = cb;
}

void
MessageChannels::SluiceAcceptable(Ctx* ctx, sluice_listener listener)
{
    MessageChannels* self = ctx->self;
    Host& h = self->m_hosts[ctx->index];
    for (;;)
    {
        int64_t accepting = h.accepting;
        Ctx* rx = self->NewCtx(accepting < 0 ? 0 : static_cast<uint32_t>(accepting));
        sluice_conn conn;
        int32_t rc = h.stack->Accept(listener,
                                     MakeBoundCallback(&MessageChannels::SluiceRxReady, rx),
                                     &conn);
        if (rc != SLUICE_ERROR_OK)
        {
            self->m_ctx.pop_back();
            return;
        }
        self->Accepted(ctx->index, conn, nullptr);
    }
}

void
MessageChannels::SluiceTxReady(Ctx* ctx, sluice_conn /* conn */, uint32_t readiness)
{
    MessageChannels* self = ctx->self;
    Channel& ch = self->m_channels[ctx->index];
    if (readiness & SLUICE_READY_ERROR)
    {
        std::ostringstream s;
        s << "channel " << ch.index << " (" << ch.src << " -> " << ch.dst << ") failed";
        self->Fail(s.str());
        return;
    }
    if ((readiness & SLUICE_READY_CONNECTED) && !ch.txOpen)
    {
        ch.txOpen = true;
        if (ch.rxOpen)
        {
            self->m_open++;
            if (self->m_open == self->m_channels.size() && !self->m_allOpen.IsNull())
            {
                Callback<void> cb = self->m_allOpen;
                self->m_allOpen = Callback<void>();
                cb();
            }
        }
    }
    self->PumpSend(ch);
}

void
MessageChannels::SluiceRxReady(Ctx* ctx, sluice_conn /* conn */, uint32_t readiness)
{
    MessageChannels* self = ctx->self;
    Channel& ch = self->m_channels[ctx->index];
    if (readiness & SLUICE_READY_ERROR)
    {
        std::ostringstream s;
        s << "channel " << ch.index << " (" << ch.src << " -> " << ch.dst << ") failed at its receiver";
        self->Fail(s.str());
        return;
    }
    self->PumpRecv(ch);
}

void
MessageChannels::TcpConnected(Ctx* ctx, Ptr<Socket> /* socket */)
{
    MessageChannels* self = ctx->self;
    Channel& ch = self->m_channels[ctx->index];
    ch.txOpen = true;
    if (ch.rxOpen)
    {
        self->m_open++;
        if (self->m_open == self->m_channels.size() && !self->m_allOpen.IsNull())
        {
            Callback<void> cb = self->m_allOpen;
            self->m_allOpen = Callback<void>();
            cb();
        }
    }
    self->PumpSend(ch);
}

void
MessageChannels::TcpConnectFailed(Ctx* ctx, Ptr<Socket> /* socket */)
{
    std::ostringstream s;
    s << "channel " << ctx->index << " failed to connect";
    ctx->self->Fail(s.str());
}

void
MessageChannels::TcpSendSpace(Ctx* ctx, Ptr<Socket> /* socket */, uint32_t /* space */)
{
    ctx->self->PumpSend(ctx->self->m_channels[ctx->index]);
}

void
MessageChannels::TcpAccepted(Ctx* ctx, Ptr<Socket> socket, const Address& /* from */)
{
    MessageChannels* self = ctx->self;
    Host& h = self->m_hosts[ctx->index];
    if (h.accepting < 0)
    {
        self->Fail("a connection was accepted that no channel opened");
        return;
    }
    socket->SetRecvCallback(
        MakeBoundCallback(&MessageChannels::TcpReadable, self->NewCtx(static_cast<uint32_t>(h.accepting))));
    self->Accepted(ctx->index, 0, socket);
}

void
MessageChannels::TcpReadable(Ctx* ctx, Ptr<Socket> /* socket */)
{
    ctx->self->PumpRecv(ctx->self->m_channels[ctx->index]);
}

void
MessageChannels::Send(uint32_t channel, uint64_t bytes, Class cls)
{
    Channel& ch = m_channels[channel];
    ch.queue.push_back(Message{bytes, Simulator::Now(), cls});
    ch.toSend += bytes;
    PumpSend(ch);
}

void
MessageChannels::PumpSend(Channel& ch)
{
    if (!ch.txOpen)
    {
        return;
    }
    while (ch.toSend > 0)
    {
        size_t want = static_cast<size_t>(std::min<uint64_t>(ch.toSend, kChunk));
        // Only what the send buffer takes now: writing the pattern for bytes the stack
        // refuses cost most of a run's time.
        if (m_sluice)
        {
            sluice_conn_info info;
            if (m_hosts[ch.src].stack->GetConnInfo(ch.tx, &info) == SLUICE_ERROR_OK)
            {
                want = static_cast<size_t>(std::min<uint64_t>(want, std::max<uint64_t>(info.writable, 4096)));
            }
        }
        else
        {
            want = std::min<size_t>(want, ch.txSocket->GetTxAvailable());
        }
        if (want == 0)
        {
            return; // SLUICE_READY_WRITABLE or the send callback follows when space frees
        }
        for (size_t i = 0; i < want; i++)
        {
            m_buf[i] = SluicePatternByte(ch.index, ch.sent + i);
        }
        int64_t n;
        if (m_sluice)
        {
            n = m_hosts[ch.src].stack->Send(ch.tx, m_buf.data(), want);
            if (n == SLUICE_ERROR_WOULD_BLOCK || n == 0)
            {
                return; // SLUICE_READY_WRITABLE follows
            }
            if (n < 0)
            {
                Fail(std::string("send: ") + sluice_strerror(n));
                return;
            }
        }
        else
        {
            n = ch.txSocket->Send(Create<Packet>(m_buf.data(), static_cast<uint32_t>(want)));
            if (n <= 0)
            {
                return;
            }
        }
        ch.toSend -= static_cast<uint64_t>(n);
        ch.sent += static_cast<uint64_t>(n);
    }
}

void
MessageChannels::PumpRecv(Channel& ch)
{
    if (!ch.rxOpen)
    {
        return;
    }
    if (m_sluice)
    {
        for (;;)
        {
            int64_t n = m_hosts[ch.dst].stack->Recv(ch.rx, m_buf.data(), m_buf.size());
            if (n == SLUICE_ERROR_WOULD_BLOCK || n == 0)
            {
                return;
            }
            if (n < 0)
            {
                Fail(std::string("recv: ") + sluice_strerror(n));
                return;
            }
            Consume(ch, m_buf.data(), static_cast<size_t>(n));
        }
    }
    while (Ptr<Packet> p = ch.rxSocket->Recv())
    {
        if (p->GetSize() == 0)
        {
            return;
        }
        std::vector<uint8_t> data(p->GetSize());
        p->CopyData(data.data(), data.size());
        Consume(ch, data.data(), data.size());
    }
}

void
MessageChannels::Consume(Channel& ch, const uint8_t* buf, size_t n)
{
    for (size_t i = 0; i < n; i++)
    {
        if (buf[i] != SluicePatternByte(ch.index, ch.read + i))
        {
            if (m_verified)
            {
                std::ostringstream s;
                s << "channel " << ch.index << ": wrong byte at offset " << ch.read + i;
                Fail(s.str());
            }
            m_verified = false;
            break;
        }
    }
    ch.read += n;
    while (n > 0)
    {
        if (ch.queue.empty())
        {
            Fail("read bytes nobody sent");
            m_verified = false;
            return;
        }
        const Message& head = ch.queue.front();
        uint64_t take = std::min<uint64_t>(head.bytes - ch.headRead, n);
        ch.headRead += take;
        n -= static_cast<size_t>(take);
        if (ch.headRead == head.bytes)
        {
            m_done.push_back(Completion{ch.index,
                                        head.cls,
                                        head.bytes,
                                        Simulator::Now() - head.start,
                                        Simulator::Now()});
            ch.queue.pop_front();
            ch.headRead = 0;
        }
    }
}

void
MessageChannels::Fail(const std::string& what)
{
    if (m_error.empty())
    {
        m_error = what;
    }
}

uint32_t
MessageChannels::GetChannels() const
{
    return static_cast<uint32_t>(m_channels.size());
}

uint32_t
MessageChannels::GetOpen() const
{
    return m_open;
}

const std::vector<MessageChannels::Completion>&
MessageChannels::GetCompletions() const
{
    return m_done;
}

uint64_t
MessageChannels::GetOutstanding() const
{
    uint64_t n = 0;
    for (const Channel& ch : m_channels)
    {
        n += ch.queue.size();
    }
    return n;
}

uint64_t
MessageChannels::GetBytesRead(uint32_t channel) const
{
    return channel < m_channels.size() ? m_channels[channel].read : 0;
}

bool
MessageChannels::IsVerified() const
{
    return m_verified;
}

const std::string&
MessageChannels::GetError() const
{
    return m_error;
}

std::string
MessageChannels::DescribeStuck(uint32_t most) const
{
    std::ostringstream s;
    for (const Channel& ch : m_channels)
    {
        if (ch.queue.empty() || most == 0)
        {
            continue;
        }
        most--;
        s << "channel " << ch.index << " " << ch.src << " -> " << ch.dst << ": " << ch.queue.size()
          << " messages waiting, " << ch.sent << " bytes sent, " << ch.toSend << " to send, "
          << ch.read << " read";
        if (m_sluice)
        {
            sluice_conn_info tx;
            sluice_conn_info rx;
            if (m_hosts[ch.src].stack->GetConnInfo(ch.tx, &tx) == SLUICE_ERROR_OK &&
                m_hosts[ch.dst].stack->GetConnInfo(ch.rx, &rx) == SLUICE_ERROR_OK)
            {
                s << ", sender state " << tx.state << " cwnd " << tx.cwnd << " unacked " << tx.unacked
                  << " rto " << tx.rto_ns << " ns, receiver readable " << rx.readable;
            }
        }
        else if (ch.txSocket && ch.rxSocket)
        {
            s << ", sender tx available " << ch.txSocket->GetTxAvailable() << " errno "
              << ch.txSocket->GetErrno() << ", receiver rx available "
              << ch.rxSocket->GetRxAvailable();
        }
        s << "\n";
    }
    return s.str();
}

uint32_t
MessageChannels::GetSource(uint32_t channel) const
{
    return channel < m_channels.size() ? m_channels[channel].src : 0;
}

} // namespace ns3
