build-dev/obj/termd/fsio.o: termd/fsio.c termd/fsio.h proto/proto.h \
 proto/util.h
termd/fsio.h:
proto/proto.h:
proto/util.h:
