# The kernel's own cost of listing a set (the floor of any drift check that reads
# every element): one NFT_MSG_GETSETELEM dump over netlink, nothing decoded but the element
# count, no nft, no JSON. The kernel fills one message per recv() (at most 32 KiB, whatever
# the buffer) and walks the set from its start for each message.
#   ip netns exec NS python3 bench/sets/setelem_dump.py TABLE SET [BUFSIZE]   (family inet)
import resource, socket, struct, sys, time
NETLINK_NETFILTER = 12
NFNL_SUBSYS_NFTABLES = 10
NFT_MSG_GETSETELEM = 13
NLM_F_REQUEST, NLM_F_ACK, NLM_F_DUMP = 1, 4, 0x300
NFTA_SET_ELEM_LIST_TABLE, NFTA_SET_ELEM_LIST_SET, NFTA_SET_ELEM_LIST_ELEMENTS = 1, 2, 3
NLMSG_DONE, NLMSG_ERROR = 3, 2
def attr(t, data):
    l = 4 + len(data)
    return struct.pack("HH", l, t) + data + b"\0" * ((4 - l % 4) % 4)
table, sname = sys.argv[1], sys.argv[2]
bufsize = int(sys.argv[3]) if len(sys.argv) > 3 else 32768
s = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_NETFILTER)
s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 22)
payload = struct.pack("BBH", 1, 0, 0) + attr(NFTA_SET_ELEM_LIST_TABLE, table.encode() + b"\0") + attr(NFTA_SET_ELEM_LIST_SET, sname.encode() + b"\0")
msg = struct.pack("IHHII", 16 + len(payload), (NFNL_SUBSYS_NFTABLES << 8) | NFT_MSG_GETSETELEM, NLM_F_REQUEST | NLM_F_DUMP, 1, 0) + payload
t0 = time.time(); c0 = time.process_time(); r0 = resource.getrusage(resource.RUSAGE_SELF).ru_stime
s.send(msg)
msgs = nbytes = elems = 0
done = False
while not done:
    data = s.recv(bufsize)
    nbytes += len(data)
    off = 0
    while off < len(data):
        l, typ, flags, seq, pid = struct.unpack_from("IHHII", data, off)
        if typ == NLMSG_DONE: done = True; break
        if typ == NLMSG_ERROR:
            err = struct.unpack_from("i", data, off + 16)[0]
            if err: print("error", err); sys.exit(1)
            done = True; break
        msgs += 1
        # count NFTA_LIST_ELEM nests inside NFTA_SET_ELEM_LIST_ELEMENTS
        a = off + 20
        while a < off + l:
            al, at = struct.unpack_from("HH", data, a)
            if at & 0x7fff == NFTA_SET_ELEM_LIST_ELEMENTS:
                b = a + 4
                while b < a + al:
                    bl, bt = struct.unpack_from("HH", data, b); elems += 1; b += (bl + 3) & ~3
            a += (al + 3) & ~3
        off += (l + 3) & ~3
sys_s = resource.getrusage(resource.RUSAGE_SELF).ru_stime - r0
print(f"{elems} elements, {msgs} messages, {nbytes} bytes, buf {bufsize}: {time.time()-t0:.2f} s wall, {sys_s:.3f} s system (the kernel's walk)")
