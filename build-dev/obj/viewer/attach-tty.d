build-dev/obj/viewer/attach-tty.o: viewer/attach-tty.c viewer/attach.h \
 proto/client.h /usr/include/cjson/cJSON.h proto/proto.h proto/util.h \
 proto/vtfilter.h proto/util.h proto/vtparse.h
viewer/attach.h:
proto/client.h:
/usr/include/cjson/cJSON.h:
proto/proto.h:
proto/util.h:
proto/vtfilter.h:
proto/util.h:
proto/vtparse.h:
