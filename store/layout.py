"""The CommitLog record's layout, defined once: RocketMQ's v1 layout (4.x
`CommitLog.MessageExtEncoder`), byte for byte. Every reader of records imports it: the codec
(store/record.py), the dispatch scan (store/fast_scan.py), the consumers' decoder
(client/consumer/received.py), the Spark source's columns (client/spark/records.py), and their
compiled twins (store/_layout.pxi, included by every compiled reader of records, reads these
constants when a module loads).
tests/unit/test_import_graph.py fails on a second definition.

All integers are big-endian.

    #   field                         bytes
    1   TOTALSIZE (whole record)      4
    2   MAGICCODE 0xDAA320A7          4
    3   BODYCRC crc32(body)&0x7FFFFFFF 4
    4   QUEUEID                       4
    5   FLAG                          4
    6   QUEUEOFFSET                   8
    7   PHYSICALOFFSET                8
    8   SYSFLAG                       4
    9   BORNTIMESTAMP (ms)            8
    10  BORNHOST ip(4|16) + port(4)   8 or 20 (20 when sysFlag & 0x10)
    11  STORETIMESTAMP (ms)           8
    12  STOREHOST ip(4|16) + port(4)  8 or 20 (20 when sysFlag & 0x20)
    13  RECONSUMETIMES                4
    14  PREPARED TRANSACTION OFFSET   8
    15  BODYLEN + body                4 + n
    16  TOPICLEN + topic (UTF-8)      1 + n   (n <= 127)
    17  PROPLEN + properties          2 + n   (n <= 32767)

Properties are `name\\x01value\\x02` repeated. At the end of a segment, when a record (plus 8
bytes) does not fit, the rest of the file starts with a blank `[4 remaining][4 0xCBD43194]`.
msgId (RocketMQ's offsetMsgId) is the uppercase hex of store ip + store port + physical offset.
"""

from __future__ import annotations

import struct
from typing import Final

# The magic codes (Java ints).
MAGIC_V1: Final = -626843481  # 0xDAA320A7
BLANK_MAGIC: Final = -875286124  # 0xCBD43194
# The smallest end-of-file blank: [4 remaining][4 BLANK_MAGIC].
END_OF_FILE_MIN_BLANK: Final = 8
BLANK_FORMAT: Final = ">ii"

# SYSFLAG bits.
FLAG_COMPRESSED: Final = 0x1
FLAG_MULTI_TAGS: Final = 0x2
TRANSACTION_MASK: Final = 0xC
TRANSACTION_NOT_TYPE: Final = 0x0
TRANSACTION_PREPARED_TYPE: Final = 0x4
TRANSACTION_COMMIT_TYPE: Final = 0x8
TRANSACTION_ROLLBACK_TYPE: Final = 0xC
FLAG_BORNHOST_V6: Final = 0x10
FLAG_STOREHOST_V6: Final = 0x20
FLAG_INNER_BATCH: Final = 0x80

MAX_TOPIC_BYTES: Final = 127
MAX_PROPERTIES_BYTES: Final = 32767

# Offsets of fields 2-10 from the record's start (they do not depend on the hosts' lengths).
OFFSET_MAGIC: Final = 4
OFFSET_BODY_CRC: Final = 8
OFFSET_QUEUE_ID: Final = 12
OFFSET_FLAG: Final = 16
OFFSET_QUEUE_OFFSET: Final = 20
OFFSET_PHYSICAL_OFFSET: Final = 28
OFFSET_SYS_FLAG: Final = 36
OFFSET_BORN_TIMESTAMP: Final = 40
OFFSET_BORN_HOST: Final = 48

# A host: ip(4) + port(4), or ip(16) + port(4) when its sysFlag bit says IPv6.
HOST_V4_SIZE: Final = 8
HOST_V6_SIZE: Final = 20

# Fields 1-9, everything before the born host.
PREFIX_FORMAT: Final = ">iiiiiqqiq"
PREFIX_SIZE: Final = 48
assert struct.calcsize(PREFIX_FORMAT) == PREFIX_SIZE == OFFSET_BORN_HOST

# A record with IPv4 hosts has a fixed head, fields 1-15 up to the body: total 0, magic 4,
# body CRC 8, queue id 12, flag 16, queue offset 20, physical offset 28, sys flag 36, born
# timestamp 40, born host 48, store timestamp 56, store host 64, reconsume times 72, prepared
# transaction offset 76, body length 84; the body follows, then the topic's length (1 byte),
# the topic, the properties' length (2 bytes) and the properties.
HEAD_V4_FORMAT: Final = PREFIX_FORMAT + "8sq8siqi"
HEAD_V4_SIZE: Final = 88
OFFSET_STORE_TIMESTAMP_V4: Final = 56
OFFSET_STORE_HOST_V4: Final = 64
OFFSET_RECONSUME_TIMES_V4: Final = 72
OFFSET_PREPARED_OFFSET_V4: Final = 76
OFFSET_BODY_LENGTH_V4: Final = 84
assert struct.calcsize(HEAD_V4_FORMAT) == HEAD_V4_SIZE
assert OFFSET_STORE_TIMESTAMP_V4 == OFFSET_BORN_HOST + HOST_V4_SIZE
assert OFFSET_STORE_HOST_V4 == OFFSET_STORE_TIMESTAMP_V4 + 8
assert OFFSET_RECONSUME_TIMES_V4 == OFFSET_STORE_HOST_V4 + HOST_V4_SIZE
assert OFFSET_PREPARED_OFFSET_V4 == OFFSET_RECONSUME_TIMES_V4 + 4
assert OFFSET_BODY_LENGTH_V4 == OFFSET_PREPARED_OFFSET_V4 + 8 == HEAD_V4_SIZE - 4
# The same head, read for the dispatch scan (store/fast_scan.py): TOTALSIZE, MAGICCODE,
# QUEUEID, QUEUEOFFSET, PHYSICALOFFSET, SYSFLAG, STORETIMESTAMP, BODYLENGTH; the rest skipped.
FAST_HEAD_FORMAT: Final = ">ii4xi4xqqi16xq20xi"
assert struct.calcsize(FAST_HEAD_FORMAT) == HEAD_V4_SIZE
# The smallest record: the head, an empty body and topic, and the properties' length.
MIN_RECORD: Final = HEAD_V4_SIZE + 1 + 2
