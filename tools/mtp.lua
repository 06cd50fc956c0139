-- Wireshark/tshark dissector for MTP (Sluice's message transport, mtp.txt Figure 4; the
-- byte layout is docs/mtp.md). Directly over IPv4 protocol 253, or in UDP to port 9919.
--   tshark -X lua_script:tools/mtp.lua -r capture.pcap -V
local mtp = Proto("mtp", "Message Transport Protocol (MTP)")

local f = mtp.fields
f.src_port = ProtoField.uint16("mtp.srcport", "Source Port")
f.dst_port = ProtoField.uint16("mtp.dstport", "Destination Port")
f.version = ProtoField.uint8("mtp.version", "Version", base.DEC, nil, 0xf0)
f.flags = ProtoField.uint8("mtp.flags", "Flags", base.HEX, nil, 0x0f)
f.flag_data = ProtoField.bool("mtp.flags.data", "DATA", 4, nil, 0x1)
f.flag_ack = ProtoField.bool("mtp.flags.ack", "ACK", 4, nil, 0x2)
f.priority = ProtoField.uint8("mtp.priority", "Message Priority")
f.tc = ProtoField.uint8("mtp.tc", "Traffic Class")
f.hdr_len = ProtoField.uint8("mtp.hdr_len", "Header Length (bytes)")
f.msg_id = ProtoField.uint32("mtp.msg_id", "Message ID")
f.msg_len = ProtoField.uint32("mtp.msg_len", "Message Length (bytes)")
f.msg_pkts = ProtoField.uint16("mtp.msg_pkts", "Message Length (packets)")
f.pkt_num = ProtoField.uint16("mtp.pkt_num", "Packet Number")
f.pkt_offset = ProtoField.uint32("mtp.pkt_offset", "Packet Offset")
f.pkt_len = ProtoField.uint16("mtp.pkt_len", "Packet Length")
f.checksum = ProtoField.uint16("mtp.checksum", "Checksum", base.HEX)
f.device_flags = ProtoField.uint8("mtp.device_flags", "Device Flags", base.HEX)
f.trimmed = ProtoField.bool("mtp.trimmed", "Trimmed", 8, nil, 0x1)
f.feedback_full = ProtoField.bool("mtp.feedback_full", "Feedback Full", 8, nil, 0x2)
f.pathlet = ProtoField.uint16("mtp.pathlet", "Pathlet ID")
f.entry_tc = ProtoField.uint8("mtp.entry_tc", "TC")
local kinds = { [1] = "ECN", [2] = "Rate (Mbit/s)", [3] = "Queue (bytes)" }
f.fb_kind = ProtoField.uint8("mtp.feedback.kind", "Feedback Type", base.DEC, kinds)
f.fb_value = ProtoField.uint32("mtp.feedback.value", "Feedback Value")
f.run_msg = ProtoField.uint32("mtp.run.msg_id", "Message ID")
f.run_first = ProtoField.uint16("mtp.run.first", "First Packet")
f.run_count = ProtoField.uint16("mtp.run.count", "Packets")
f.payload = ProtoField.bytes("mtp.payload", "Payload")

local function feedback(tree, buf, at, label)
    local t = tree:add(mtp, buf(at, 8), label)
    t:add(f.pathlet, buf(at, 2))
    t:add(f.entry_tc, buf(at + 2, 1))
    t:add(f.fb_kind, buf(at + 3, 1))
    t:add(f.fb_value, buf(at + 4, 4))
end

local function run(tree, buf, at, label)
    local t = tree:add(mtp, buf(at, 8), label)
    t:add(f.run_msg, buf(at, 4))
    t:add(f.run_first, buf(at + 4, 2))
    t:add(f.run_count, buf(at + 6, 2))
end

function mtp.dissector(buf, pinfo, tree)
    if buf:len() < 36 then return 0 end
    pinfo.cols.protocol = "MTP"
    local hdr_len = buf(7, 1):uint() * 4
    local t = tree:add(mtp, buf(0, math.min(hdr_len, buf:len())), "Message Transport Protocol")
    t:add(f.src_port, buf(0, 2))
    t:add(f.dst_port, buf(2, 2))
    t:add(f.version, buf(4, 1))
    local fl = t:add(f.flags, buf(4, 1))
    fl:add(f.flag_data, buf(4, 1))
    fl:add(f.flag_ack, buf(4, 1))
    t:add(f.priority, buf(5, 1))
    t:add(f.tc, buf(6, 1))
    t:add(f.hdr_len, buf(7, 1), hdr_len)
    t:add(f.msg_id, buf(8, 4))
    t:add(f.msg_len, buf(12, 4))
    t:add(f.msg_pkts, buf(16, 2))
    t:add(f.pkt_num, buf(18, 2))
    t:add(f.pkt_offset, buf(20, 4))
    t:add(f.pkt_len, buf(24, 2))
    t:add(f.checksum, buf(26, 2))
    local df = t:add(f.device_flags, buf(33, 1))
    df:add(f.trimmed, buf(33, 1))
    df:add(f.feedback_full, buf(33, 1))
    local xc, fs, ac, sc, nc = buf(28, 1):uint(), buf(29, 1):uint(), buf(30, 1):uint(),
        buf(31, 1):uint(), buf(32, 1):uint()
    local fc = buf(34, 1):uint()
    if 36 + 4 * xc + 8 * (fs + ac + sc + nc) ~= hdr_len or buf:len() < hdr_len then
        t:add_expert_info(PI_MALFORMED, PI_ERROR, "header length disagrees with its lists")
        return buf:len()
    end
    local at = 36
    for i = 1, xc do
        local e = t:add(mtp, buf(at, 4), "Path Exclude: pathlet " .. buf(at, 2):uint()
            .. ", TC " .. buf(at + 2, 1):uint())
        e:add(f.pathlet, buf(at, 2))
        e:add(f.entry_tc, buf(at + 2, 1))
        at = at + 4
    end
    for i = 1, fs do
        if i <= fc then feedback(t, buf, at, "Path Feedback") end
        at = at + 8
    end
    for i = 1, ac do feedback(t, buf, at, "ACK Path Feedback"); at = at + 8 end
    for i = 1, sc do run(t, buf, at, "SACK"); at = at + 8 end
    for i = 1, nc do run(t, buf, at, "NACK"); at = at + 8 end
    local flags = buf(4, 1):uint() % 16
    local info = "MTP " .. buf(0, 2):uint() .. " > " .. buf(2, 2):uint()
    if flags % 2 == 1 then
        info = info .. " DATA msg=" .. buf(8, 4):uint() .. " pkt=" .. buf(18, 2):uint()
            .. "/" .. buf(16, 2):uint()
    end
    if math.floor(flags / 2) % 2 == 1 then
        info = info .. " ACK sack=" .. sc .. " nack=" .. nc
    end
    if buf(33, 1):uint() % 2 == 1 then info = info .. " [TRIMMED]" end
    pinfo.cols.info = info
    if buf:len() > hdr_len then
        t:add(f.payload, buf(hdr_len))
    end
    return buf:len()
end

DissectorTable.get("ip.proto"):add(253, mtp)
DissectorTable.get("udp.port"):add(9919, mtp)
