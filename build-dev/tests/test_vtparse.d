build-dev/tests/test_vtparse: tests/unit/test_vtparse.c proto/util.h \
 proto/vtparse.h
proto/util.h:
proto/vtparse.h:
