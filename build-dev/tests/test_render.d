build-dev/tests/test_render: tests/unit/test_render.c termd/render.h \
 proto/util.h
termd/render.h:
proto/util.h:
