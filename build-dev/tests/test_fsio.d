build-dev/tests/test_fsio: tests/unit/test_fsio.c termd/fsio.h \
 proto/proto.h proto/util.h
termd/fsio.h:
proto/proto.h:
proto/util.h:
