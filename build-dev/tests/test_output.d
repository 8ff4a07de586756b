build-dev/tests/test_output: tests/unit/test_output.c termd/output.h \
 proto/util.h
termd/output.h:
proto/util.h:
