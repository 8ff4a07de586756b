build-dev/tests/test_vtfilter: tests/unit/test_vtfilter.c \
 proto/vtfilter.h proto/util.h proto/vtparse.h
proto/vtfilter.h:
proto/util.h:
proto/vtparse.h:
