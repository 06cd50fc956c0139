// What the bulk and RPC applications share: the connecting side's one connection (open,
// ready, error, close) and the listening side's listener and accept loop, so each
// application keeps only its own logic.
#ifndef SLUICE_NS3_SLUICE_APP_H
#define SLUICE_NS3_SLUICE_APP_H

#include "sluice-stack.h"

#include "ns3/application.h"
#include "ns3/ipv4-address.h"
#include "ns3/nstime.h"

#include <cstdint>
#include <vector>

namespace ns3
{

/// Opens one connection to `m_remote`:`m_port` on the node's SluiceStack when started and
/// closes it when stopped; a connection error is recorded and closes it. Subclasses send
/// and receive in Connected() and OnReady().
class SluiceConnectingApp : public Application
{
  public:
    /// The ns-3 type (abstract; subclasses declare the attributes, with their defaults).
    static TypeId GetTypeId();

    /// When the connection was opened.
    Time GetStartTime() const;
    /// The last error the stack returned (0: none).
    int64_t GetError() const;

  protected:
    /// The connection is established (called once, before any OnReady()).
    virtual void Connected() = 0;
    /// The connection's readiness changed (not an error, which closed it).
    virtual void OnReady(uint32_t readiness) = 0;
    /// Records `error` (a negative sluice_error) and closes the connection.
    void Fail(int64_t error);
    /// Closes the connection (a FIN after what is queued); later events are ignored.
    void CloseConnection();

    Ptr<SluiceStack> m_stack;
    Ipv4Address m_remote;
    uint16_t m_port{0};
    uint32_t m_streamId{0};
    sluice_conn m_conn{0};
    /// Open: not yet closed by the application, an error or the stop.
    bool m_open{false};
    bool m_connected{false};
    Time m_started;
    int64_t m_error{0};

  private:
    void StartApplication() override;
    void StopApplication() override;
    /// The stack's readiness callback: errors here, the rest to the subclass.
    void Ready(sluice_conn conn, uint32_t readiness);
};

/// Listens on `m_port` on the node's SluiceStack when started and accepts every connection;
/// subclasses handle each in Accepted() and OnReady().
class SluiceListeningApp : public Application
{
  public:
    /// The ns-3 type (abstract; subclasses declare the attributes, with their defaults).
    static TypeId GetTypeId();

  protected:
    /// `conn` was accepted; data may have arrived before the accept.
    virtual void Accepted(sluice_conn conn) = 0;
    /// `conn`'s readiness changed.
    virtual void OnReady(sluice_conn conn, uint32_t readiness) = 0;

    Ptr<SluiceStack> m_stack;
    uint16_t m_port{0};
    uint32_t m_streamId{0};
    sluice_listener m_listener{0};

  private:
    void StartApplication() override;
    /// The listener has connections waiting.
    void Acceptable(sluice_listener listener);
    /// The stack's readiness callback for an accepted connection.
    void Ready(sluice_conn conn, uint32_t readiness);
};

/// Sends up to `len` bytes of stream `stream`'s pattern, from `offset`, on `conn` until the
/// send buffer is full, `buf`'s size at a time; returns the bytes the stack took. `*error`
/// is 0, or the stack's negative error (a full buffer is none).
uint64_t SluiceSendPattern(SluiceStack& stack,
                           sluice_conn conn,
                           uint32_t stream,
                           uint64_t offset,
                           uint64_t len,
                           std::vector<uint8_t>& buf,
                           int64_t* error);

/// The index of the first of `n` bytes of `buf` that differs from stream `stream`'s pattern
/// at `offset` (`n` when none does).
size_t SluiceFirstMismatch(const uint8_t* buf, size_t n, uint32_t stream, uint64_t offset);

} // namespace ns3

#endif // SLUICE_NS3_SLUICE_APP_H
